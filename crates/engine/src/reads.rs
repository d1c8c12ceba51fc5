//! What one evaluation read of the sessions. It serves twice:
//!
//! - as a cache: a guard, the handles and the state lookup navigate through the same few
//!   sessions; the first time evaluation reaches a session, every attribute the contract can
//!   read (its slots, see [`Compiled::slots`]) is copied out under one look-up and one lock, and
//!   the rest of the evaluation reads the copy;
//! - as the record of an unlocked evaluation (the single-assignment negotiator's prediction),
//!   checked once the sessions are held: if no session it read changed since (the attributes'
//!   generation, see [`tandem_container::Attributes::generation`]), the locked evaluation would
//!   reach the same outcome, and it is not run (see `MachineService::drive`).
//!
//! Each entry keeps its session's cell, so that the check, the commit and the handler reach
//! the session again without looking its ID up in the store.

use crate::compiled::{Compiled, ROLE_SLOT};
use crate::eval::Value;
use smallvec::SmallVec;
use smol_str::SmolStr;
use tandem_container::{AttrValue, Context, SessionCell, SessionId};

/// One session an evaluation reached.
struct Entry {
    id: SessionId,
    /// The session, if it existed (if not, every attribute of it reads Null).
    cell: Option<SessionCell>,
    /// Its attributes' generation when they were copied.
    generation: u64,
    /// The index of its role in the contract, if its `@role` names one.
    role: Option<usize>,
    /// Where its slots start in `Reads::values`.
    base: usize,
    /// A prediction read it: its lock is wanted ([`Reads::want`]).
    wanted: bool,
}

#[derive(Default)]
pub(crate) struct Reads {
    entries: SmallVec<[Entry; 4]>,
    /// The sessions' slots, `slots.len()` per existing entry. Only the general evaluator
    /// fills them (the fast path records cells and generations): a `Vec`, which costs the
    /// fast path nothing, where an inline vector made `Reads` ~400 bytes larger on every
    /// message's stack.
    values: Vec<Value>,
    /// Something was read that this record cannot check later (an application session's
    /// attribute).
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

impl Reads {
    /// The entry of session `id` (None: no such session), copying its slots out the first time.
    pub fn load(&mut self, ctx: &mut Context<'_>, compiled: &Compiled, id: SessionId) -> Option<usize> {
        if let Some(at) = self.entries.iter().position(|e| e.id == id) {
            return self.entries[at].cell.is_some().then_some(at);
        }
        let base = self.values.len();
        let cell = ctx.session(id);
        let mut generation = 0;
        let mut role = None;
        if let Some(cell) = &cell {
            let n = compiled.slots.len();
            // A handful of slots: pushed one by one (cheaper than `resize`'s general extend).
            self.values.reserve(n);
            for _ in 0..n {
                self.values.push(Value::Null);
            }
            let slots = &mut self.values[base..];
            let s = cell.lock();
            for (name, v) in s.attributes.iter() {
                let Some(slot) = compiled.slot(name) else { continue };
                let Some(at) = slots.get_mut(slot) else { continue };
                *at = match v {
                    AttrValue::Session(s) => Value::Session(*s),
                    // A declared role's name is the contract's: cloned, not copied.
                    AttrValue::Str(text) if slot == ROLE_SLOT => {
                        role = compiled.role_index(text);
                        Value::Str(role.map_or_else(|| SmolStr::new(text), |r| compiled.role_text(r).clone()))
                    }
                    AttrValue::Str(text) => Value::Str(SmolStr::new(text)),
                    v => to_value(Some(v)),
                };
            }
            generation = s.attributes.generation();
            drop(s);
            // A role stored as bytes reads as text too.
            if role.is_none() {
                if let Some(Value::Str(text)) = slots.get(ROLE_SLOT) {
                    role = compiled.role_index(text);
                }
            }
        }
        let exists = cell.is_some();
        self.entries.push(Entry { id, cell, generation, role, base, wanted: false });
        exists.then_some(self.entries.len() - 1)
    }

    /// The entry of session `id` as the direct path reads it (`MachineService::predict_direct`):
    /// its cell and generation are kept, but no slot is copied; `read` runs on the session
    /// under the same lock. None: no such session (recorded as missing, as `load` does).
    pub fn touch_with<R>(
        &mut self,
        ctx: &mut Context<'_>,
        id: SessionId,
        read: impl FnOnce(&tandem_container::SipSession) -> R,
    ) -> Option<(usize, R)> {
        if let Some(at) = self.entries.iter().position(|e| e.id == id) {
            let cell = self.entries[at].cell.as_ref()?;
            let r = read(&cell.lock());
            return Some((at, r));
        }
        let cell = ctx.session(id);
        let (generation, r) = match &cell {
            Some(cell) => {
                let s = cell.lock();
                (s.attributes.generation(), Some(read(&s)))
            }
            None => (0, None),
        };
        self.entries.push(Entry { id, cell, generation, role: None, base: self.values.len(), wanted: false });
        r.map(|r| (self.entries.len() - 1, r))
    }

    /// Records session `id` as the engine's fast path read it (`MachineService::fast_select`):
    /// its cell, the generation it saw, wanted; no slot copied.
    pub fn record(&mut self, id: SessionId, cell: SessionCell, generation: u64) {
        self.entries.push(Entry { id, cell: Some(cell), generation, role: None, base: self.values.len(), wanted: true });
    }

    /// Records session `id` as the fast path found it: missing (as `touch_with` records it).
    pub fn record_missing(&mut self, id: SessionId) {
        self.entries.push(Entry { id, cell: None, generation: 0, role: None, base: self.values.len(), wanted: false });
    }

    /// Whether a session that exists was recorded (the fast path's record).
    pub fn any_session(&self) -> bool {
        self.entries.iter().any(|e| e.cell.is_some())
    }

    /// Whether session `id` exists, as [`Self::exists`] answers it for the direct path: the
    /// session is recorded (with its generation) but no slot is copied.
    pub fn present(&mut self, ctx: &mut Context<'_>, id: SessionId) -> bool {
        match self.entries.iter().find(|e| e.id == id) {
            Some(e) => e.cell.is_some(),
            None => self.touch_with(ctx, id, |_| ()).is_some(),
        }
    }

    /// The sessions recorded, sorted (for comparing two records of one evaluation).
    pub fn recorded(&self) -> Vec<SessionId> {
        let mut ids: Vec<SessionId> = self.entries.iter().map(|e| e.id).collect();
        ids.sort_unstable();
        ids
    }

    /// The role (index) of a loaded session.
    pub fn role(&self, entry: usize) -> Option<usize> {
        self.entries[entry].role
    }

    /// Slot `slot` of a loaded session.
    pub fn value(&self, entry: usize, slot: usize) -> &Value {
        &self.values[self.entries[entry].base + slot]
    }

    /// Notes that an unlocked evaluation read this session: it will need its lock.
    pub fn want(&mut self, entry: usize) {
        self.entries[entry].wanted = true;
    }

    /// The sessions [`Self::want`] noted, in the order they were first reached.
    pub fn wanted(&self) -> impl Iterator<Item = SessionId> + '_ {
        self.entries.iter().filter(|e| e.wanted).map(|e| e.id)
    }

    /// Whether session `id` exists.
    pub fn exists(&mut self, ctx: &mut Context<'_>, compiled: &Compiled, id: SessionId) -> bool {
        self.load(ctx, compiled, id).is_some()
    }

    /// An application session's attribute was read: not recorded, so not checkable.
    pub fn read_unrecorded(&mut self) {
        self.unrepeatable = true;
    }

    /// The cell of session `id`, if evaluation found it.
    pub fn cell(&self, id: SessionId) -> Option<&SessionCell> {
        self.entries.iter().find(|e| e.id == id).and_then(|e| e.cell.as_ref())
    }

    /// Whether every session still exists (or not) as read, with attributes unchanged since.
    /// One lock per session (its cell is kept); a session read as missing is looked up.
    pub fn unchanged(&self, ctx: &mut Context<'_>) -> bool {
        if self.unrepeatable {
            return false;
        }
        self.entries.iter().all(|e| match &e.cell {
            None => ctx.session(e.id).is_none(),
            Some(cell) => unchanged_since(cell, e.generation),
        })
    }
}

/// The cells a transition's commit reaches its sessions through (no store look-up for them):
/// those its evaluation read, then those its arm created.
pub(crate) struct Cells<'r> {
    pub reads: &'r Reads,
    pub created: &'r [(SessionId, SessionCell)],
}

impl Cells<'_> {
    pub fn cell(&self, id: SessionId) -> Option<&SessionCell> {
        self.reads.cell(id).or_else(|| self.created.iter().find(|(c, _)| *c == id).map(|(_, cell)| cell))
    }
}

/// Whether a session read at attributes' `generation` still exists with nothing changed since
/// (one lock on its cell).
pub(crate) fn unchanged_since(cell: &SessionCell, generation: u64) -> bool {
    let s = cell.lock();
    !s.is_removed() && s.attributes.generation() == generation
}
