use crate::ids::SessionId;
use bytes::Bytes;
use smallvec::SmallVec;

/// A typed attribute value of a SIP or application session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttrValue {
    Str(String),
    Int(i64),
    Bool(bool),
    Bytes(Bytes),
    /// A reference to another SIP session (resolve it with `Context::session_exists` or by ID).
    Session(SessionId),
}

/// Attributes by name; sessions carry a handful, so a small vector beats a hash map.
#[derive(Debug, Clone, Default)]
pub struct Attributes {
    entries: SmallVec<[(Box<str>, AttrValue); 4]>,
    /// Counts changes: whoever copied attributes out can tell with one comparison that none
    /// changed since (the contract engine checks its unlocked reads this way).
    generation: u64,
    /// A word a reader derived from these attributes, and the generation it holds for (see
    /// [`Attributes::memo`]).
    memo: u32,
    memo_generation: u64,
}

/// Whether an entry's name is `name`. Names are short and most entries a look-up passes differ
/// in length or first byte: checked before the bytes are compared (a library call).
#[inline]
fn same_name(n: &str, name: &str) -> bool {
    n.len() == name.len() && n.as_bytes().first() == name.as_bytes().first() && n == name
}

impl Attributes {
    /// The word last given to [`Attributes::set_memo`], if no attribute changed since: what a
    /// reader derived from them (the contract engine keeps a session's role and state there as
    /// indices) without looking the names up again. Never 0. One word per session: it belongs
    /// to the service that owns the session (its encoding is that service's).
    pub fn memo(&self) -> Option<u32> {
        (self.memo != 0 && self.memo_generation == self.generation).then_some(self.memo)
    }

    /// Keeps `memo` (not 0) until the next change of the attributes; it is not a change itself.
    pub fn set_memo(&mut self, memo: u32) {
        self.memo = memo;
        self.memo_generation = self.generation;
    }

    #[inline]
    pub fn get(&self, name: &str) -> Option<&AttrValue> {
        self.entries.iter().find(|(n, _)| same_name(n, name)).map(|(_, v)| v)
    }

    pub fn set(&mut self, name: &str, value: AttrValue) -> Option<AttrValue> {
        self.generation += 1;
        match self.entries.iter_mut().find(|(n, _)| same_name(n, name)) {
            Some((_, v)) => Some(std::mem::replace(v, value)),
            None => {
                self.entries.push((name.into(), value));
                None
            }
        }
    }

    /// Sets `name` to the text `value`, reusing the buffer of the text it holds, if any (no
    /// allocation when a text attribute is overwritten by one that fits, e.g. a state name).
    pub fn set_str(&mut self, name: &str, value: &str) {
        self.generation += 1;
        match self.entries.iter_mut().find(|(n, _)| same_name(n, name)) {
            Some((_, AttrValue::Str(s))) => {
                s.clear();
                s.push_str(value);
            }
            Some((_, v)) => *v = AttrValue::Str(value.to_string()),
            None => self.entries.push((name.into(), AttrValue::Str(value.to_string()))),
        }
    }

    pub fn remove(&mut self, name: &str) -> Option<AttrValue> {
        let i = self.entries.iter().position(|(n, _)| same_name(n, name))?;
        self.generation += 1;
        Some(self.entries.remove(i).1)
    }

    /// Changes so far (`set` and `remove`): equal generations mean equal attributes.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    #[inline]
    pub fn get_str(&self, name: &str) -> Option<&str> {
        match self.get(name) {
            Some(AttrValue::Str(s)) => Some(s),
            _ => None,
        }
    }

    pub fn get_int(&self, name: &str) -> Option<i64> {
        match self.get(name) {
            Some(AttrValue::Int(i)) => Some(*i),
            _ => None,
        }
    }

    pub fn get_bool(&self, name: &str) -> Option<bool> {
        match self.get(name) {
            Some(AttrValue::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    #[inline]
    pub fn get_session(&self, name: &str) -> Option<SessionId> {
        match self.get(name) {
            Some(AttrValue::Session(s)) => Some(*s),
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &AttrValue)> {
        self.entries.iter().map(|(n, v)| (&**n, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memo_holds_until_a_change() {
        let mut a = Attributes::default();
        assert_eq!(a.memo(), None);
        a.set_memo(7);
        assert_eq!(a.memo(), Some(7));
        a.set_str("x", "y");
        assert_eq!(a.memo(), None, "a set drops the memo");
        a.set_memo(8);
        assert_eq!(a.clone().memo(), Some(8));
        a.remove("x");
        assert_eq!(a.memo(), None, "a removal drops the memo");
        a.set_memo(9);
        a.set("z", AttrValue::Int(1));
        assert_eq!(a.memo(), None);
    }

    #[test]
    fn set_str_overwrites_and_counts() {
        let mut a = Attributes::default();
        a.set_str("s", "Idle");
        let g = a.generation();
        a.set_str("s", "TalkingWithMS");
        assert_eq!(a.get_str("s"), Some("TalkingWithMS"));
        assert!(a.generation() > g);
        a.set("n", AttrValue::Int(1));
        a.set_str("n", "x");
        assert_eq!(a.get_str("n"), Some("x"));
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn typed_access() {
        let mut a = Attributes::default();
        a.set("role", AttrValue::Str("Caller".into()));
        a.set("n", AttrValue::Int(3));
        a.set("peer", AttrValue::Session(SessionId(9)));
        assert_eq!(a.get_str("role"), Some("Caller"));
        assert_eq!(a.get_int("role"), None);
        assert_eq!(a.set("n", AttrValue::Int(4)), Some(AttrValue::Int(3)));
        assert_eq!(a.get_session("peer"), Some(SessionId(9)));
        assert_eq!(a.remove("n"), Some(AttrValue::Int(4)));
        assert_eq!(a.len(), 2);
        let g = a.generation();
        assert_eq!(a.remove("n"), None);
        assert_eq!(a.generation(), g, "nothing removed, nothing changed");
        a.set("n", AttrValue::Int(5));
        assert!(a.generation() > g);
    }
}
