//! `dating`: the paper's dating service, contract version — `services/dating.machine` plus
//! one handler arm per transition (the paper's Figure 3). No locking, role or state tests
//! here: the contract does them, the engine acquires what each transition touches.
//!
//! Differences from the paper's annotations, forced by the container or the completion of
//! the machine (see `services/dating.machine` for T12-T19):
//! - the container acknowledges a 2xx as soon as it arrives, so T4 does not relay the caller's
//!   ACK to the media service (the paper's `Msr!ACK`), and T8's `Caller!ACK` is the container's;
//! - the caller's SDP offer is kept on its session (attribute `sdp`) for T7's re-INVITEs.

use bytes::Bytes;
use serde::Deserialize;
use std::sync::Arc;
use tandem_container::{AttrValue, Destination, UaProfile};
use tandem_engine::dispatch::{Arms, CompiledService, Contract, Step};
use tandem_engine::{ArmContext, Body, Compiled, Handler, HandlerError, MachineService, Negotiator, Transition};
use tandem_sip::Method;

/// The contract, embedded so the binary runs without the source tree.
pub const DATING_CONTRACT: &str = include_str!("../../../services/dating.machine");

const SDP: &str = "application/sdp";

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatingConfig {
    /// The media service (`IP:PORT`, or `tcp:IP:PORT`).
    pub media: String,
}

impl Default for DatingConfig {
    fn default() -> Self {
        DatingConfig { media: "127.0.0.1:5070".into() }
    }
}

static PROFILE: UaProfile = UaProfile {
    allowed_methods: &["INVITE", "ACK", "BYE", "CANCEL", "OPTIONS", "MESSAGE", "UPDATE", "INFO"],
    accepted_bodies: &["application/sdp", "text/plain"],
    supported_extensions: &[],
    answer_body: Some("application/sdp"),
};

pub struct Dating {
    media: Destination,
    /// `sip:media@IP:PORT`, made once.
    media_uri: String,
}

// Errors are out of line and cold: their code is laid out away from the arms' common paths
// (fewer instruction-cache lines per message).
#[cold]
#[inline(never)]
fn err(what: &str) -> HandlerError {
    HandlerError(what.to_string())
}

#[cold]
#[inline(never)]
fn no_attr(name: &str) -> HandlerError {
    err(&format!("session has no {name}"))
}

/// `services/dating.machine` compiled to Rust by the build script (`tandem_contract::codegen`),
/// for [`dating_compiled_service`].
#[allow(clippy::all, dead_code)]
pub mod contract {
    include!(concat!(env!("OUT_DIR"), "/dating_contract.rs"));
}

use contract::T as Arm;

impl Dating {
    #[inline(always)]
    fn session_attr(
        t: &mut impl ArmContext,
        id: tandem_container::SessionId,
        name: &str,
    ) -> Result<tandem_container::SessionId, HandlerError> {
        t.session_attr(id, name)?.ok_or_else(|| no_attr(name))
    }

    /// The caller's SDP offer (shared, not copied).
    #[inline(always)]
    fn sdp(t: &mut impl ArmContext, caller: tandem_container::SessionId) -> Result<Body, HandlerError> {
        Ok(match t.attr(caller, "sdp")? {
            Some(AttrValue::Bytes(b)) => Body::new(SDP, b),
            _ => Body::new(SDP, Bytes::new()),
        })
    }
}

impl Handler for Dating {
    type Arm = Arm;

    fn arm(&self, name: &str) -> Option<Arm> {
        let index = <contract::Machine as Contract>::NAMES.iter().position(|n| *n == name)?;
        contract::TS.get(index).copied()
    }

    fn do_transition(&self, arm: Arm, t: &mut Transition<'_, '_>) -> Result<(), HandlerError> {
        self.run_arm(arm, t)
    }
}

impl Arms<contract::Machine> for Dating {
    #[inline(always)]
    fn run(&self, arm: Arm, step: &mut Step<'_, '_, contract::Machine>) -> Result<(), HandlerError> {
        self.run_arm(arm, step)
    }
}

impl Dating {
    /// The arms, one per transition: the same code whether the engine or the compiled
    /// contract runs them.
    #[inline(always)]
    fn run_arm(&self, arm: Arm, t: &mut impl ArmContext) -> Result<(), HandlerError> {
        let sips = t.sips();
        match arm {
            // Caller?INVITE: create the media leg, invite it with the caller's session ID.
            Arm::T1 => {
                let offer = t.body();
                let caller = t.accept()?;
                let msr = t.create_leg("sip:dating@tandem.invalid", &self.media_uri, self.media)?;
                t.set_role_and_attrs(caller, "Caller", [("sdp", AttrValue::Bytes(offer)), ("msr", AttrValue::Session(msr))])?;
                t.set_role_and_attrs(msr, "Msr", [("caller", AttrValue::Session(caller))])?;
                t.invite(msr, Some(Body::new("text/plain", caller.to_string())))?;
            }
            // Msr?OK: answer the caller with the media service's SDP.
            Arm::T2 => {
                let msr = sips.ok_or_else(|| err("no session"))?;
                let caller = Self::session_attr(t, msr, "caller")?;
                let answer = t.body();
                t.answer(caller, 200, Some(Body::new(SDP, answer)))?;
            }
            // Caller?CANCEL (the container answered 200 and 487): drop the media leg.
            Arm::T3 => {
                let caller = sips.ok_or_else(|| err("no session"))?;
                let msr = Self::session_attr(t, caller, "msr")?;
                t.cancel(msr)?;
            }
            // Caller?ACK: the media leg was acknowledged by the container already.
            Arm::T4 | Arm::T8 | Arm::T12 | Arm::T16 => {}
            // The caller never acknowledged our 200 and the container's BYE was answered or
            // failed: end the media leg too.
            Arm::T20 => {
                let caller = sips.ok_or_else(|| err("no session"))?;
                let msr = Self::session_attr(t, caller, "msr")?;
                t.bye(msr)?;
            }
            // Caller?BYE before pairing: end both legs.
            Arm::T5 | Arm::T15 => {
                let caller = sips.ok_or_else(|| err("no session"))?;
                t.respond(200);
                let msr = Self::session_attr(t, caller, "msr")?;
                t.bye(msr)?;
            }
            // Msr?MESSAGE(peer) with the peer unavailable: tell the media service.
            Arm::T6 => {
                let msr = sips.ok_or_else(|| err("no session"))?;
                t.respond(200);
                t.send(msr, Method::Message, Some(Body::new("text/plain", &b"unavailable"[..])))?;
            }
            // Msr?MESSAGE(peer) with the peer talking to its media service: pair them.
            Arm::T7 => {
                let msr = sips.ok_or_else(|| err("no session"))?;
                t.respond(200);
                let caller = Self::session_attr(t, msr, "caller")?;
                // `p2t`, the session the suggestion names, as the contract bound it.
                let peer = t.session_var("p2t").ok_or_else(|| err("the peer ended meanwhile"))?;
                let peer_msr = Self::session_attr(t, peer, "msr")?;
                t.set_attr(caller, "p2t", AttrValue::Session(peer))?;
                t.set_attr(peer, "p2t", AttrValue::Session(caller))?;
                let (caller_sdp, peer_sdp) = (Self::sdp(t, caller)?, Self::sdp(t, peer)?);
                t.invite(caller, Some(peer_sdp))?;
                t.invite(peer, Some(caller_sdp))?;
                t.bye(msr)?;
                t.bye(peer_msr)?;
            }
            // Msr?MESSAGE after pairing, Caller?BYE crossing ours: just answer.
            Arm::T9 | Arm::T13 => t.respond(200),
            // Msr?ERROR while inviting it: the caller's call fails.
            Arm::T10 => {
                let msr = sips.ok_or_else(|| err("no session"))?;
                let caller = Self::session_attr(t, msr, "caller")?;
                let status = t.status().max(500);
                t.answer(caller, status, None)?;
            }
            // Caller?BYE while talking to the peer, or while being paired: hang up the peer.
            Arm::T11 | Arm::T14 => {
                let caller = sips.ok_or_else(|| err("no session"))?;
                t.respond(200);
                let peer = Self::session_attr(t, caller, "p2t")?;
                t.bye(peer)?;
            }
            // The media service failed or hung up before pairing: hang up the caller.
            Arm::T17 | Arm::T18 => {
                let msr = sips.ok_or_else(|| err("no session"))?;
                if arm == Arm::T18 {
                    t.respond(200);
                }
                let caller = Self::session_attr(t, msr, "caller")?;
                t.bye(caller)?;
            }
            // The caller rejected the re-INVITE that connects the peer: end both calls.
            Arm::T19 => {
                let caller = sips.ok_or_else(|| err("no session"))?;
                let peer = Self::session_attr(t, caller, "p2t")?;
                t.bye(caller)?;
                t.bye(peer)?;
            }
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DatingError {
    #[error("the dating contract is invalid:\n{0}")]
    Contract(String),
    #[error(transparent)]
    Compile(#[from] tandem_engine::CompileError),
    #[error("dating.media {0:?} is not IP:PORT, udp:IP:PORT or tcp:IP:PORT")]
    Media(String),
}

/// The dating service (contract version) on its contract compiled to Rust
/// (`tandem_engine::dispatch`), served as `dating_compiled`.
pub fn dating_compiled_service(config: &DatingConfig) -> Result<Arc<CompiledService<contract::Machine, Dating>>, DatingError> {
    let media = Destination::parse(&config.media).ok_or_else(|| DatingError::Media(config.media.clone()))?;
    let media_uri = format!("sip:media@{}", media.addr);
    Ok(CompiledService::new("dating_compiled", Dating { media, media_uri }, Some(PROFILE)))
}

/// The dating service (contract version) with the given negotiator.
pub fn dating_service(config: &DatingConfig, negotiator: Negotiator) -> Result<Arc<MachineService<Dating>>, DatingError> {
    let media = Destination::parse(&config.media).ok_or_else(|| DatingError::Media(config.media.clone()))?;
    let (machine, diagnostics) = tandem_contract::parse_and_check(DATING_CONTRACT);
    let machine = match machine {
        Some(m) if !tandem_contract::has_errors(&diagnostics) => m,
        _ => return Err(DatingError::Contract(tandem_contract::render_all(&diagnostics, "dating.machine", DATING_CONTRACT))),
    };
    let media_uri = format!("sip:media@{}", media.addr);
    Ok(MachineService::new("dating", Compiled::new(machine)?, Dating { media, media_uri }, negotiator, Some(PROFILE))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_with_every_negotiator_and_rejects_a_bad_media_address() {
        for n in [Negotiator::Ordered, Negotiator::SingleAssign, Negotiator::Global] {
            assert!(dating_service(&DatingConfig::default(), n).is_ok());
        }
        assert!(dating_service(&DatingConfig { media: "media.example.com".into() }, Negotiator::Ordered).is_err());
        assert!(dating_compiled_service(&DatingConfig::default()).is_ok());
        assert!(dating_compiled_service(&DatingConfig { media: "media.example.com".into() }).is_err());
    }

    use crate::dating_manual::{self as manual, Kind};
    use contract::{Ev, Machine, Role, State, STATES};
    use tandem_container::SessionId;
    use tandem_engine::dispatch::{Facts, Reads};

    /// A message's sessions as the generated selection reads them: the caller session (1), its
    /// media leg (2), and the peer the payload names (3) in `peer_state`.
    struct Sessions {
        sips: SessionId,
        payload: Option<SessionId>,
        peer_state: State,
    }

    impl Reads<State> for Sessions {
        fn sips(&self) -> Option<SessionId> {
            Some(self.sips)
        }
        fn payload(&self) -> Option<SessionId> {
            self.payload
        }
        fn attr(&self, of: Option<SessionId>, name: &'static str) -> Option<SessionId> {
            match (of?.0, name) {
                (2, "caller") => Some(SessionId(1)),
                (1, "msr") => Some(SessionId(2)),
                _ => None,
            }
        }
        fn state(&self, of: Option<SessionId>) -> Option<State> {
            (of? == SessionId(3)).then_some(self.peer_state)
        }
    }

    fn ev(kind: Kind) -> Ev {
        match kind {
            Kind::Invite => Ev::Invite,
            Kind::Ack => Ev::Ack,
            Kind::Bye => Ev::Bye,
            Kind::Cancel => Ev::Cancel,
            Kind::Message => Ev::Message,
            Kind::Ok => Ev::Ok,
            Kind::Error => Ev::Error,
            Kind::Other => Ev::Other,
        }
    }

    /// The selection generated from the contract (`tandem_contract::codegen`) takes the
    /// transition the hand-written version's tables take, for every state, message, role and
    /// peer: the two were written independently.
    #[test]
    fn the_compiled_selection_agrees_with_the_hand_written_tables() {
        const KINDS: [Kind; 8] = [Kind::Invite, Kind::Ack, Kind::Bye, Kind::Cancel, Kind::Message, Kind::Ok, Kind::Error, Kind::Other];
        let mut compared = 0;
        for state in STATES {
            let hand_state = manual::State::parse(<Machine as Contract>::state_name(state)).unwrap();
            for kind in KINDS {
                for answers_invite in [false, true] {
                    let facts = Facts { kind: ev(kind), cseq: if answers_invite { Ev::Invite } else { Ev::Other }, status: 0 };
                    let r = Sessions { sips: SessionId(1), payload: None, peer_state: State::Idle };
                    let got = <Machine as Contract>::select(state, Some(Role::Caller), &facts, &r);
                    let want = manual::caller_transition(kind, hand_state, answers_invite);
                    assert_eq!(
                        got.map(|t| format!("{t:?}")),
                        want.map(|t| t.name().to_string()),
                        "Caller {state:?} {kind:?} {answers_invite}"
                    );
                    compared += 1;
                }
                for (payload, peer_state) in [
                    (None, State::TalkingWithMS),
                    (Some(3), State::TalkingWithMS),
                    (Some(3), State::Pairing),
                    (Some(1), State::TalkingWithMS),
                ] {
                    let facts = Facts { kind: ev(kind), cseq: Ev::Other, status: 0 };
                    let r = Sessions { sips: SessionId(2), payload: payload.map(SessionId), peer_state };
                    let got = <Machine as Contract>::select(state, Some(Role::Msr), &facts, &r);
                    let talking = payload == Some(3) && peer_state == State::TalkingWithMS;
                    let want = manual::msr_transition(kind, hand_state, talking);
                    assert_eq!(
                        got.map(|t| format!("{t:?}")),
                        want.map(|t| t.name().to_string()),
                        "Msr {state:?} {kind:?} {payload:?} {peer_state:?}"
                    );
                    compared += 1;
                }
            }
            // A new session (no role): only T1, on INVITE in the initial state.
            let facts = Facts { kind: Ev::Invite, cseq: Ev::Invite, status: 0 };
            let r = Sessions { sips: SessionId(1), payload: None, peer_state: State::Idle };
            let got = <Machine as Contract>::select(state, None, &facts, &r);
            assert_eq!(got, (state == State::Idle).then_some(Arm::T1));
        }
        assert_eq!(compared, 8 * 8 * 6);
    }
}
