//! What one evaluation read of the sessions. It serves twice:
//!
//! - as a cache: a guard, the handles and the state lookup navigate through the same few
//!   sessions, and each attribute is read from the session store once per evaluation instead of
//!   once per navigation step;
//! - as the record of an unlocked evaluation (the single-assignment negotiator's prediction),
//!   checked once the sessions are held: if every attribute still reads the same, the locked
//!   evaluation would reach the same outcome, and it is not run (see `MachineService::drive`).

use crate::engine::ROLE;
use crate::eval::Value;
use smallvec::SmallVec;
use smol_str::SmolStr;
use tandem_container::{AttrValue, Context, SessionId};

/// One thing an evaluation found out about a session.
enum Seen {
    /// The session does not exist (every attribute of it reads Null).
    Missing,
    /// The session exists (`session(text)`).
    Present,
    /// A raw attribute (`@role`, `@state`, a declared name) and the value read.
    Attr(SmolStr, Value),
}

#[derive(Default)]
pub(crate) struct Reads {
    seen: SmallVec<[(SessionId, Seen); 6]>,
    /// Something was read that this record cannot check later (an application session's
    /// attribute, or a session that disappeared during the evaluation).
    unrepeatable: bool,
}

pub(crate) fn to_value(v: Option<&AttrValue>) -> Value {
    match v {
        None => Value::Null,
        Some(AttrValue::Str(s)) => Value::Str(SmolStr::new(s)),
        Some(AttrValue::Int(i)) => Value::Int(*i),
        Some(AttrValue::Bool(b)) => Value::Bool(*b),
        Some(AttrValue::Bytes(b)) => Value::Str(SmolStr::new(String::from_utf8_lossy(b))),
        Some(AttrValue::Session(s)) => Value::Session(*s),
    }
}

/// `to_value(stored) == *read`, without converting text.
fn same(stored: Option<&AttrValue>, read: &Value) -> bool {
    match (stored, read) {
        (None, Value::Null) => true,
        (Some(AttrValue::Str(s)), Value::Str(r)) => s == r,
        (Some(AttrValue::Int(i)), Value::Int(r)) => i == r,
        (Some(AttrValue::Bool(b)), Value::Bool(r)) => b == r,
        (Some(AttrValue::Session(s)), Value::Session(r)) => s == r,
        (Some(b @ AttrValue::Bytes(_)), r) => to_value(Some(b)) == *r,
        _ => false,
    }
}

impl Reads {
    /// The session's role attribute and raw attribute `attr` (None: no such session).
    pub fn session(&mut self, ctx: &mut Context<'_>, id: SessionId, attr: &str) -> Option<(Value, Value)> {
        let (mut known, mut role, mut value) = (false, None, None);
        for (_, seen) in self.seen.iter().filter(|(s, _)| *s == id) {
            match seen {
                Seen::Missing => return None,
                Seen::Present => known = true,
                Seen::Attr(name, v) => {
                    known = true;
                    if name == ROLE {
                        role = Some(v);
                    }
                    if name == attr {
                        value = Some(v);
                    }
                }
            }
        }
        if let (Some(role), Some(value)) = (role, value) {
            return Some((role.clone(), value.clone()));
        }
        // What this evaluation saw first stands (the role never changes anyway).
        let (role, value) = (role.cloned(), value.cloned());
        let Some((fresh_role, fresh_value)) = ctx.with_session(id, |_, s| {
            (role.is_none().then(|| to_value(s.attributes.get(ROLE))), value.is_none().then(|| to_value(s.attributes.get(attr))))
        }) else {
            if known {
                // It was there earlier in this evaluation and is gone now.
                self.unrepeatable = true;
            } else {
                self.seen.push((id, Seen::Missing));
            }
            return None;
        };
        let role = role.or_else(|| {
            self.seen.push((id, Seen::Attr(SmolStr::new_static(ROLE), fresh_role.clone().unwrap_or(Value::Null))));
            fresh_role
        });
        let value = match value {
            Some(v) => v,
            None if attr == ROLE => role.clone().unwrap_or(Value::Null),
            None => {
                let v = fresh_value.unwrap_or(Value::Null);
                self.seen.push((id, Seen::Attr(SmolStr::new(attr), v.clone())));
                v
            }
        };
        Some((role.unwrap_or(Value::Null), value))
    }

    /// Whether session `id` exists.
    pub fn exists(&mut self, ctx: &Context<'_>, id: SessionId) -> bool {
        if let Some((_, seen)) = self.seen.iter().find(|(s, _)| *s == id) {
            return !matches!(seen, Seen::Missing);
        }
        let exists = ctx.session(id).is_some();
        self.seen.push((id, if exists { Seen::Present } else { Seen::Missing }));
        exists
    }

    /// An application session's attribute was read: not recorded, so not checkable.
    pub fn read_unrecorded(&mut self) {
        self.unrepeatable = true;
    }

    /// Whether every session still exists (or not) as read, with every attribute read still
    /// holding the value read. One look-up per session.
    pub fn unchanged(&self, ctx: &mut Context<'_>) -> bool {
        if self.unrepeatable {
            return false;
        }
        let seen = &self.seen;
        seen.iter().enumerate().all(|(i, (id, first))| {
            // Each session once, at its first record.
            if seen[..i].iter().any(|(s, _)| s == id) {
                return true;
            }
            let found = ctx.with_session(*id, |_, s| {
                seen[i..].iter().filter(|(r, _)| r == id).all(|(_, seen)| match seen {
                    Seen::Missing => false,
                    Seen::Present => true,
                    Seen::Attr(name, v) => same(s.attributes.get(name.as_str()), v),
                })
            });
            match found {
                Some(same) => same,
                None => matches!(first, Seen::Missing),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_agrees_with_to_value() {
        let id = SessionId(7);
        let stored = [
            None,
            Some(AttrValue::Str("TalkingWithMS".into())),
            Some(AttrValue::Str("a text longer than twenty-three bytes".into())),
            Some(AttrValue::Int(3)),
            Some(AttrValue::Bool(true)),
            Some(AttrValue::Bytes(bytes::Bytes::from_static(b"TalkingWithMS"))),
            Some(AttrValue::Session(id)),
        ];
        for a in &stored {
            for b in &stored {
                assert_eq!(same(a.as_ref(), &to_value(b.as_ref())), to_value(a.as_ref()) == to_value(b.as_ref()), "{a:?} vs {b:?}");
            }
        }
    }
}
