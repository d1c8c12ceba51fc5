//! What one evaluation read of the sessions. It serves twice:
//!
//! - as a cache: a guard, the handles and the state lookup navigate through the same few
//!   sessions; the first time evaluation reaches a session, every attribute the contract can
//!   read (its slots, see [`Compiled::slots`]) is copied out under one look-up and one lock, and
//!   the rest of the evaluation reads the copy;
//! - as the record of an unlocked evaluation (the single-assignment negotiator's prediction),
//!   checked once the sessions are held: if every attribute it used still reads the same, the
//!   locked evaluation would reach the same outcome, and it is not run (see
//!   `MachineService::drive`).

use crate::compiled::{Compiled, ROLE_SLOT};
use crate::eval::Value;
use smallvec::SmallVec;
use smol_str::SmolStr;
use tandem_container::{AttrValue, Context, SessionId};

/// One session an evaluation reached.
struct Entry {
    id: SessionId,
    /// Whether the session existed (if not, every attribute of it reads Null).
    exists: bool,
    /// The index of its role in the contract, if its `@role` names one.
    role: Option<usize>,
    /// Where its slots start in `Reads::values`.
    base: usize,
    /// The slots evaluation used (bit `min(slot, 63)`): what `unchanged` checks.
    used: u64,
}

#[derive(Default)]
pub(crate) struct Reads {
    entries: SmallVec<[Entry; 4]>,
    /// The sessions' slots, `slots.len()` per existing entry.
    values: SmallVec<[Value; 16]>,
    /// Something was read that this record cannot check later (an application session's
    /// attribute).
    unrepeatable: bool,
}

fn bit(slot: usize) -> u64 {
    1 << slot.min(63)
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
    /// The entry of session `id` (None: no such session), copying its slots out the first time.
    pub fn load(&mut self, ctx: &mut Context<'_>, compiled: &Compiled, id: SessionId) -> Option<usize> {
        if let Some(at) = self.entries.iter().position(|e| e.id == id) {
            return self.entries[at].exists.then_some(at);
        }
        let base = self.values.len();
        let values = &mut self.values;
        let exists = ctx
            .with_session(id, |_, s| {
                values.reserve(compiled.slots.len());
                for _ in 0..compiled.slots.len() {
                    values.push(Value::Null);
                }
                for (name, v) in s.attributes.iter() {
                    if let Some(slot) = compiled.slot(name) {
                        values[base + slot] = to_value(Some(v));
                    }
                }
            })
            .is_some();
        let role = match self.values.get(base + ROLE_SLOT) {
            Some(Value::Str(role)) if exists => compiled.role_index(role),
            _ => None,
        };
        self.entries.push(Entry { id, exists, role, base, used: 0 });
        exists.then_some(self.entries.len() - 1)
    }

    /// The role (index) of a loaded session.
    pub fn role(&self, entry: usize) -> Option<usize> {
        self.entries[entry].role
    }

    /// Slot `slot` of a loaded session, noting that evaluation used it.
    pub fn value(&mut self, entry: usize, slot: usize) -> &Value {
        let e = &mut self.entries[entry];
        e.used |= bit(slot);
        &self.values[e.base + slot]
    }

    /// Whether session `id` exists.
    pub fn exists(&mut self, ctx: &mut Context<'_>, compiled: &Compiled, id: SessionId) -> bool {
        self.load(ctx, compiled, id).is_some()
    }

    /// An application session's attribute was read: not recorded, so not checkable.
    pub fn read_unrecorded(&mut self) {
        self.unrepeatable = true;
    }

    /// Whether every session still exists (or not) as read, with every attribute used still
    /// holding the value read. One look-up per session.
    pub fn unchanged(&self, ctx: &mut Context<'_>, compiled: &Compiled) -> bool {
        if self.unrepeatable {
            return false;
        }
        self.entries.iter().all(|e| {
            if !e.exists {
                return ctx.session(e.id).is_none();
            }
            let values = &self.values[e.base..e.base + compiled.slots.len()];
            // Few slots are used (the role, the state): looked up by name.
            ctx.with_session(e.id, |_, s| {
                compiled
                    .slots
                    .iter()
                    .zip(values)
                    .enumerate()
                    .filter(|(slot, _)| e.used & bit(*slot) != 0)
                    .all(|(_, (name, v))| same(s.attributes.get(name), v))
            })
            .unwrap_or(false)
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
