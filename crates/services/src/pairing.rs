//! `pairing`: a rendezvous service written as a business machine (`services/pairing.machine`)
//! plus one handler arm per transition. Callers learn their session ID from the 200 OK body
//! and pair up by sending a MESSAGE naming another caller's ID.

use std::sync::Arc;
use tandem_container::{AttrValue, UaProfile};
use tandem_engine::{Body, Compiled, Handler, HandlerError, MachineService, Negotiator, Transition};

/// The contract, embedded so the binary runs without the source tree.
pub const PAIRING_CONTRACT: &str = include_str!("../../../services/pairing.machine");

static PROFILE: UaProfile = UaProfile {
    allowed_methods: &["INVITE", "ACK", "BYE", "CANCEL", "OPTIONS", "MESSAGE"],
    accepted_bodies: &["text/plain", "application/sdp"],
    supported_extensions: &[],
    answer_body: None,
};

pub struct Pairing;

tandem_engine::arms! {
    /// The transitions of `services/pairing.machine`.
    pub enum Arm { Join, Pair, Busy, Late, Hangup }
}

impl Handler for Pairing {
    type Arm = Arm;

    fn arm(&self, name: &str) -> Option<Arm> {
        Arm::from_name(name)
    }

    fn do_transition(&self, arm: Arm, t: &mut Transition<'_, '_>) -> Result<(), HandlerError> {
        match arm {
            Arm::Join => {
                let me = t.accept()?;
                t.set_role(me, "Party")?;
                t.answer(me, 200, Some(Body::new("text/plain", me.to_string())))?;
            }
            Arm::Pair => {
                let me = t.sips().ok_or_else(|| HandlerError("the message has no session".into()))?;
                // `p`, the session the suggestion names, as the contract bound it.
                let peer = t.session_var("p").ok_or_else(|| HandlerError("the peer ended meanwhile".into()))?;
                t.set_attr(me, "peer", AttrValue::Session(peer))?;
                t.set_attr(peer, "peer", AttrValue::Session(me))?;
                t.respond_with(200, &[], Some(Body::new("text/plain", peer.to_string())));
            }
            Arm::Busy => t.respond_with(200, &[], Some(Body::new("text/plain", &b"busy"[..]))),
            Arm::Late | Arm::Hangup => t.respond(200),
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PairingError {
    #[error("the pairing contract is invalid:\n{0}")]
    Contract(String),
    #[error(transparent)]
    Compile(#[from] tandem_engine::CompileError),
}

/// The pairing service with the given negotiator.
pub fn pairing_service(negotiator: Negotiator) -> Result<Arc<MachineService<Pairing>>, PairingError> {
    let (machine, diagnostics) = tandem_contract::parse_and_check(PAIRING_CONTRACT);
    let machine = match machine {
        Some(m) if !tandem_contract::has_errors(&diagnostics) => m,
        _ => return Err(PairingError::Contract(tandem_contract::render_all(&diagnostics, "pairing.machine", PAIRING_CONTRACT))),
    };
    Ok(MachineService::new("pairing", Compiled::new(machine)?, Pairing, negotiator, Some(PROFILE))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_contract_is_valid_for_every_negotiator() {
        for n in [Negotiator::Ordered, Negotiator::SingleAssign, Negotiator::Global] {
            let s = pairing_service(n).expect("valid");
            assert_eq!(s.negotiator(), n);
        }
    }
}
