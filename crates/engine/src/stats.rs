//! Per-service, per-transition counters, exported in Prometheus text format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A metric family: name, help, and how to read it from a transition's counters.
type Family = (&'static str, &'static str, fn(&TransitionStats) -> f64);

#[derive(Default)]
pub struct TransitionStats {
    pub count: AtomicU64,
    pub backoffs: AtomicU64,
    pub negotiation_ns: AtomicU64,
    pub handler_ns: AtomicU64,
    pub failures: AtomicU64,
}

#[derive(Default)]
pub struct ServiceStats {
    pub transitions: Vec<TransitionStats>,
    /// Messages that enabled no transition (resent or stray messages vanish here).
    pub absorbed: AtomicU64,
    /// Messages that enabled more than one transition: a contract defect.
    pub ambiguous: AtomicU64,
    /// Negotiations that had to wait for a session held by another transition.
    pub waits: AtomicU64,
    /// Predictions (single-assignment negotiator) whose outcome could not be kept: something
    /// they read had changed by the time its session was held, so the guard was evaluated again.
    pub reevaluations: AtomicU64,
    /// Predictions made by the direct path (no general evaluation).
    pub direct: AtomicU64,
    /// Direct predictions the general evaluator disagreed with (only checked on request).
    pub direct_mismatches: AtomicU64,
    /// Messages the fast path decided (`MachineService::fast_select`: a transition selected,
    /// or the message absorbed): direct predictions too, counted apart.
    pub fast: AtomicU64,
    /// Fast-path transitions run without the lock table: the container runs one executor, so
    /// no other transition can hold their sessions (`MachineService::run_fast`).
    pub unlocked: AtomicU64,
}

impl ServiceStats {
    pub fn new(transitions: usize) -> ServiceStats {
        ServiceStats { transitions: (0..transitions).map(|_| TransitionStats::default()).collect(), ..Default::default() }
    }

    /// The counters of the transition called `name` (`names` in the contract's order).
    pub fn named(&self, names: &[String], name: &str) -> Option<&TransitionStats> {
        names.iter().position(|n| n == name).map(|i| &self.transitions[i])
    }

    pub fn render(&self, service: &str, names: &[String]) -> String {
        let mut out = String::new();
        let families: [Family; 5] = [
            ("tandem_transitions_total", "Transitions taken", |t| t.count.load(Relaxed) as f64),
            ("tandem_transition_backoffs_total", "Negotiation back-offs (release and re-acquire in order)", |t| {
                t.backoffs.load(Relaxed) as f64
            }),
            ("tandem_transition_negotiation_seconds_total", "Time from the message to holding every session", |t| {
                t.negotiation_ns.load(Relaxed) as f64 / 1e9
            }),
            (
                "tandem_transition_handler_seconds_total",
                "Time in the handler arm (sampled: one negotiation in 8 timed, counted 8 times)",
                |t| t.handler_ns.load(Relaxed) as f64 / 1e9,
            ),
            ("tandem_transition_failures_total", "Handler arms that returned an error (nothing was sent)", |t| {
                t.failures.load(Relaxed) as f64
            }),
        ];
        for (name, help, get) in families {
            let _ = writeln!(out, "# HELP {name} {help}.\n# TYPE {name} counter");
            for (t, stats) in names.iter().zip(&self.transitions) {
                let _ = writeln!(out, "{name}{{service=\"{service}\",transition=\"{t}\"}} {}", get(stats));
            }
        }
        for (name, help, v) in [
            ("tandem_absorbed_messages_total", "Messages that enabled no transition", self.absorbed.load(Relaxed)),
            (
                "tandem_ambiguous_messages_total",
                "Messages that enabled several transitions (contract defect)",
                self.ambiguous.load(Relaxed),
            ),
            ("tandem_negotiation_waits_total", "Negotiations that waited for a session", self.waits.load(Relaxed)),
            (
                "tandem_prediction_reevaluations_total",
                "Unlocked predictions evaluated again under the locks (what they read had changed)",
                self.reevaluations.load(Relaxed),
            ),
            (
                "tandem_direct_predictions_total",
                "Predictions made without the general evaluator (direct transitions, the fast path's included)",
                self.direct.load(Relaxed) + self.fast.load(Relaxed),
            ),
            (
                "tandem_fast_selections_total",
                "Messages the fast path decided (role and state as indices, simple guards): a transition selected, or absorbed",
                self.fast.load(Relaxed),
            ),
            (
                "tandem_unlocked_transitions_total",
                "Fast-path transitions run without the lock table (one executor: no other transition can hold their sessions)",
                self.unlocked.load(Relaxed),
            ),
            (
                "tandem_direct_mismatches_total",
                "Direct predictions the general evaluator disagreed with (checked only when asked)",
                self.direct_mismatches.load(Relaxed),
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}.\n# TYPE {name} counter\n{name}{{service=\"{service}\"}} {v}");
        }
        out
    }
}
