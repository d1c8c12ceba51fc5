//! Live sessions, shared by every executor: a session ID resolves to its session whichever
//! executor asks (the synchronization contracts of later work lock sessions across calls).

use crate::ids::{AppSessionId, IdHashBuilder, SessionId};
use crate::session::{AppSession, SipSession};
use dashmap::DashMap;
use parking_lot::Mutex;
use std::sync::Arc;

pub type SessionCell = Arc<Mutex<SipSession>>;
pub type AppSessionCell = Arc<Mutex<AppSession>>;

#[derive(Default)]
pub struct SessionStore {
    sip: DashMap<SessionId, SessionCell, IdHashBuilder>,
    app: DashMap<AppSessionId, AppSessionCell, IdHashBuilder>,
}

impl SessionStore {
    pub fn session(&self, id: SessionId) -> Option<SessionCell> {
        self.sip.get(&id).map(|c| c.clone())
    }

    pub fn app_session(&self, id: AppSessionId) -> Option<AppSessionCell> {
        self.app.get(&id).map(|c| c.clone())
    }

    pub(crate) fn insert_session(&self, session: SipSession) -> SessionCell {
        let id = session.id;
        let cell = Arc::new(Mutex::new(session));
        self.sip.insert(id, cell.clone());
        cell
    }

    pub(crate) fn insert_app(&self, app: AppSession) -> AppSessionCell {
        let id = app.id;
        let cell = Arc::new(Mutex::new(app));
        self.app.insert(id, cell.clone());
        cell
    }

    pub(crate) fn remove_session(&self, id: SessionId) -> Option<SessionCell> {
        self.sip.remove(&id).map(|(_, c)| c)
    }

    pub(crate) fn remove_app(&self, id: AppSessionId) -> Option<AppSessionCell> {
        self.app.remove(&id).map(|(_, c)| c)
    }

    /// Every live SIP session, for inspection (tests, admin); not for the message path.
    pub fn snapshot(&self) -> Vec<SessionCell> {
        self.sip.iter().map(|e| e.value().clone()).collect()
    }

    pub fn live_sessions(&self) -> usize {
        self.sip.len()
    }

    pub fn live_app_sessions(&self) -> usize {
        self.app.len()
    }
}
