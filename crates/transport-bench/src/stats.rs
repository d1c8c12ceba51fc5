//! Latency samples and their summary.

use serde::Serialize;
use std::time::Duration;

/// What one implementation did for one (transport, size, session length) in one round.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    /// Round trip of each exchange, nanoseconds.
    pub latencies_ns: Vec<u64>,
    /// Sum of the sessions' durations (first send, or connect, to last response).
    pub busy: Duration,
    pub sessions: usize,
    pub failed_sessions: usize,
}

impl Samples {
    pub fn extend(&mut self, other: &Samples) {
        self.latencies_ns.extend_from_slice(&other.latencies_ns);
        self.busy += other.busy;
        self.sessions += other.sessions;
        self.failed_sessions += other.failed_sessions;
    }

    pub fn summary(&self) -> Summary {
        let mut sorted = self.latencies_ns.clone();
        sorted.sort_unstable();
        let us = |ns: u64| (ns as f64 / 1000.0 * 10.0).round() / 10.0;
        let mean = if sorted.is_empty() { 0 } else { sorted.iter().sum::<u64>() / sorted.len() as u64 };
        let secs = self.busy.as_secs_f64();
        Summary {
            exchanges: sorted.len(),
            sessions: self.sessions,
            failed_sessions: self.failed_sessions,
            p50_us: us(percentile(&sorted, 0.50)),
            p95_us: us(percentile(&sorted, 0.95)),
            p99_us: us(percentile(&sorted, 0.99)),
            mean_us: us(mean),
            max_us: us(sorted.last().copied().unwrap_or(0)),
            exchanges_per_s: if secs > 0.0 { (sorted.len() as f64 / secs).round() } else { 0.0 },
        }
    }
}

/// Nearest-rank percentile of sorted samples (0 when empty).
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub exchanges: usize,
    pub sessions: usize,
    pub failed_sessions: usize,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
    pub max_us: f64,
    /// Exchanges over the summed session durations (one exchange in flight at a time).
    pub exchanges_per_s: f64,
}

/// The median of some values (0 when empty); the mean of the two middle ones for an even count.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 { v[mid] } else { (v[mid - 1] + v[mid]) / 2.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_median() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&[7], 0.99), 7);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
