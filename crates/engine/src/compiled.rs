//! A contract prepared for evaluation: transitions indexed by source state, roles' state
//! access and single-assignment attributes.

use std::collections::{HashMap, HashSet};
use tandem_contract::ast::{self, AttrType, StateKind};

pub struct Compiled {
    pub machine: ast::Machine,
    pub initial: String,
    pub finals: HashSet<String>,
    by_state: HashMap<String, Vec<usize>>,
    roles: HashMap<String, RoleInfo>,
}

pub struct RoleInfo {
    pub holds_state: bool,
    pub state_via: Option<String>,
    /// Single-assignment attributes (`once`).
    pub once: HashSet<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("the contract has no initial state")]
    NoInitialState,
}

impl Compiled {
    pub fn new(machine: ast::Machine) -> Result<Compiled, CompileError> {
        let initial = machine.initial_state().ok_or(CompileError::NoInitialState)?.name.name.clone();
        let finals = machine.states.iter().filter(|s| s.kind == StateKind::Final).map(|s| s.name.name.clone()).collect();
        let mut by_state: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, t) in machine.transitions.iter().enumerate() {
            for from in &t.from {
                by_state.entry(from.name.clone()).or_default().push(i);
            }
        }
        let roles = machine
            .roles
            .iter()
            .map(|r| {
                let once = r.attributes.iter().filter(|a| a.once).map(|a| a.name.name.clone()).collect();
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
