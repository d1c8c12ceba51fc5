//! Built-in services. Each is a plain [`tandem_container::Service`]: business logic only, the
//! container does the SIP plumbing.
#![forbid(unsafe_code)]

pub mod b2bua;
pub mod dating;
pub mod dating_manual;
pub mod media;
pub mod pairing;
pub mod proxy;
pub mod registrar;
pub mod uas;

pub use b2bua::{B2bua, B2buaConfig, InvalidB2buaNextHop};
pub use dating::{dating_compiled_service, dating_service, DatingConfig, DATING_CONTRACT};
pub use dating_manual::{dating_manual_service, DatingManual};
pub use media::{Media, MediaConfig, MediaConfigError};
pub use pairing::{pairing_service, PAIRING_CONTRACT};
pub use proxy::{Proxy, ProxyConfig, ProxyDns};
pub use registrar::{Location, Registrar, RegistrarConfig};
pub use uas::{Uas, UasConfig};
