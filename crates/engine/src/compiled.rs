//! A contract prepared for evaluation: transitions indexed by source state, roles' state
//! access and single-assignment attributes.

use tandem_contract::ast::{self, AttrType, StateKind};

pub struct Compiled {
    pub machine: ast::Machine,
    pub initial: String,
    pub finals: Names<()>,
    by_state: Names<Vec<usize>>,
    roles: Names<RoleInfo>,
}

/// A contract's few names (states, roles, attributes) and what they map to. Looked up several
/// times per message: a scan over short strings is cheaper than hashing them.
pub struct Names<V>(Vec<(String, V)>);

impl<V> Names<V> {
    pub fn get(&self, name: &str) -> Option<&V> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    fn entry_or_insert_with(&mut self, name: &str, make: impl FnOnce() -> V) -> &mut V {
        let at = match self.0.iter().position(|(n, _)| n == name) {
            Some(at) => at,
            None => {
                self.0.push((name.to_string(), make()));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }
}

impl<V> FromIterator<(String, V)> for Names<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(iter: I) -> Self {
        let mut names = Names(Vec::new());
        for (n, v) in iter {
            match names.0.iter_mut().find(|(m, _)| *m == n) {
                Some((_, old)) => *old = v,
                None => names.0.push((n, v)),
            }
        }
        names
    }
}

pub struct RoleInfo {
    pub holds_state: bool,
    pub state_via: Option<String>,
    /// Single-assignment attributes (`once`).
    pub once: Names<()>,
}

#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("the contract has no initial state")]
    NoInitialState,
}

impl Compiled {
    pub fn new(machine: ast::Machine) -> Result<Compiled, CompileError> {
        let initial = machine.initial_state().ok_or(CompileError::NoInitialState)?.name.name.clone();
        let finals = machine.states.iter().filter(|s| s.kind == StateKind::Final).map(|s| (s.name.name.clone(), ())).collect();
        let mut by_state: Names<Vec<usize>> = Names(Vec::new());
        for (i, t) in machine.transitions.iter().enumerate() {
            for from in &t.from {
                by_state.entry_or_insert_with(&from.name, Vec::new).push(i);
            }
        }
        let roles = machine
            .roles
            .iter()
            .map(|r| {
                let once = r.attributes.iter().filter(|a| a.once).map(|a| (a.name.name.clone(), ())).collect();
                (
                    r.name.name.clone(),
                    RoleInfo { holds_state: r.holds_state, state_via: r.state_via.as_ref().map(|v| v.name.clone()), once },
                )
            })
            .collect();
        Ok(Compiled { machine, initial, finals, by_state, roles })
    }

    pub fn candidates(&self, state: &str) -> &[usize] {
        self.by_state.get(state).map_or(&[], Vec::as_slice)
    }

    pub fn role(&self, name: &str) -> Option<&RoleInfo> {
        self.roles.get(name)
    }

    /// Whether `attr` of a session playing `role` never changes once set.
    pub fn is_once(&self, role: Option<&str>, attr: &str) -> bool {
        attr == "role" || role.and_then(|r| self.roles.get(r)).is_some_and(|r| r.once.contains(attr))
    }

    pub fn transition(&self, index: usize) -> &ast::Transition {
        &self.machine.transitions[index]
    }

    pub fn is_session_attr(&self, role: &str, attr: &str) -> bool {
        self.machine
            .role(role)
            .and_then(|r| r.attributes.iter().find(|a| a.name.name == attr))
            .is_some_and(|a| matches!(a.ty, AttrType::Session(_)))
    }
}
