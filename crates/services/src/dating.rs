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
use tandem_engine::{Body, Compiled, Handler, HandlerError, MachineService, Negotiator, Transition};
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

fn err(what: &str) -> HandlerError {
    HandlerError(what.to_string())
}

impl Dating {
    fn session_attr(
        t: &mut Transition<'_, '_>,
        id: tandem_container::SessionId,
        name: &str,
    ) -> Result<tandem_container::SessionId, HandlerError> {
        t.session_attr(id, name)?.ok_or_else(|| err(&format!("session has no {name}")))
    }

    /// The caller's SDP offer (shared, not copied).
    fn sdp(t: &mut Transition<'_, '_>, caller: tandem_container::SessionId) -> Result<Body, HandlerError> {
        Ok(match t.attr(caller, "sdp")? {
            Some(AttrValue::Bytes(b)) => Body::new(SDP, b),
            _ => Body::new(SDP, Bytes::new()),
        })
    }
}

tandem_engine::arms! {
    /// The transitions of `services/dating.machine`.
    pub enum Arm { T1, T2, T3, T4, T5, T6, T7, T8, T9, T10, T11, T12, T13, T14, T15, T16, T17, T18, T19, T20 }
}

impl Handler for Dating {
    type Arm = Arm;

    fn arm(&self, name: &str) -> Option<Arm> {
        Arm::from_name(name)
    }

    fn do_transition(&self, arm: Arm, t: &mut Transition<'_, '_>) -> Result<(), HandlerError> {
        let sips = t.sips();
        match arm {
            // Caller?INVITE: create the media leg, invite it with the caller's session ID.
            Arm::T1 => {
                let offer = t.event().body();
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
                let answer = t.event().body();
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
                let status = t.event().status().max(500);
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
    }
}
