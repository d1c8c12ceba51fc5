//! Small helpers for messages.

/// Levenshtein distance (characters), for "did you mean" suggestions.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The candidate closest to `name` if it is close enough to be a plausible typo (case
/// differences count as close).
pub(crate) fn closest<'c>(name: &str, candidates: impl IntoIterator<Item = &'c str>) -> Option<&'c str> {
    let limit = (name.chars().count() / 3).clamp(1, 3);
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        if c == name {
            continue;
        }
        let d = if c.eq_ignore_ascii_case(name) { 0 } else { edit_distance(&name.to_ascii_lowercase(), &c.to_ascii_lowercase()) };
        let better = match best {
            None => true,
            Some((bd, _)) => d < bd,
        };
        if d <= limit && better {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// "`a`, `b` and `c`" (or "none").
pub(crate) fn quote_list<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    let items: Vec<String> = items.into_iter().map(|s| format!("`{}`", s.as_ref())).collect();
    match items.as_slice() {
        [] => "none".to_string(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_and_suggestions() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(closest("hadles", ["handles", "moves"]), Some("handles"));
        assert_eq!(closest("MSR", ["Msr", "Caller"]), Some("Msr"));
        assert_eq!(closest("Zzz", ["Msr", "Caller"]), None);
        assert_eq!(quote_list(["a", "b", "c"]), "`a`, `b` and `c`");
    }
}
