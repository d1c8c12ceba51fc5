//! No input makes the parser, the checker, the renderer or the diagrams panic (or overflow the
//! stack): truncations and mutations of the dating contract, token soup, pathological nesting.

mod common;

use common::*;
use tandem_contract::ast::Span;

/// Deterministic xorshift64*, so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Runs everything on `src` and checks the diagnostics' spans make sense.
fn exercise(src: &str) {
    let (machine, diags) = tandem_contract::parse_and_check(src);
    for d in &diags {
        assert!(d.span.start <= d.span.end && d.span.end <= src.len(), "bad span {:?} for {:?} in {src:?}", d.span, d.message);
        assert!(d.span.line >= 1 && d.span.col >= 1, "{d:?}");
        let out = tandem_contract::render(d, "fuzz.machine", src);
        assert!(out.starts_with(&format!("fuzz.machine:{}:{}: ", d.span.line, d.span.col)));
    }
    let _ = tandem_contract::render_all(&diags, "fuzz.machine", src);
    if let Some(m) = machine {
        let _ = tandem_contract::diagram::dot(&m);
        let _ = tandem_contract::diagram::mermaid(&m);
        for t in &m.transitions {
            let _ = t.guard.to_string();
        }
    }
}

fn char_boundaries(s: &str) -> Vec<usize> {
    s.char_indices().map(|(i, _)| i).chain([s.len()]).collect()
}

#[test]
fn every_truncation_of_the_dating_contract() {
    let src = dating_source();
    let cuts = char_boundaries(&src);
    // Every cut in the declarations and the first transitions, then every 17th character.
    let t3 = src.find("transition T3").unwrap();
    for (k, &cut) in cuts.iter().enumerate() {
        if cut < t3 || k % 17 == 0 {
            exercise(&src[..cut]);
        }
    }
    exercise(&src);
}

#[test]
fn random_mutations_of_the_dating_contract() {
    let src = dating_source();
    let alphabet: Vec<char> = "abcXYZ_019 \t\n#\"\\(){}.,:=!<>&|-é€\u{0}\r".chars().collect();
    let words = [
        "->",
        "==",
        "!=",
        "&&",
        "||",
        "same",
        "moves",
        "handles",
        "let",
        "when",
        "session(",
        "msg.",
        ".state",
        "null",
        "role",
        "transition",
        "states {",
        "}",
    ];
    let mut rng = Rng(0x5eed_1234_5678_9abc);
    for i in 0..1200 {
        // Mostly the small BASE contract (fast), every fourth time the whole dating contract.
        let mut s = if i % 4 == 0 { src.clone() } else { BASE.to_string() };
        for _ in 0..1 + rng.below(4) {
            let cuts = char_boundaries(&s);
            let at = cuts[rng.below(cuts.len())];
            match rng.below(4) {
                0 => s.insert(at, alphabet[rng.below(alphabet.len())]),
                1 => s.insert_str(at, words[rng.below(words.len())]),
                2 => {
                    // Delete a run of characters.
                    let end = cuts.iter().copied().filter(|&c| c > at).nth(rng.below(12)).unwrap_or(s.len());
                    s.replace_range(at..end, "");
                }
                _ => {
                    // Duplicate a slice somewhere else.
                    let from = cuts[rng.below(cuts.len())];
                    let to = cuts.iter().copied().filter(|&c| c >= from).nth(rng.below(40)).unwrap_or(s.len());
                    let piece = s[from..to].to_string();
                    s.insert_str(at, &piece);
                }
            }
        }
        exercise(&s);
    }
}

#[test]
fn token_soup() {
    let tokens = [
        "service",
        "role",
        "holds",
        "state",
        "via",
        "states",
        "initial",
        "final",
        "transition",
        "same",
        "let",
        "when",
        "handles",
        "moves",
        "session",
        "once",
        "null",
        "true",
        "false",
        "msg",
        ".",
        "sips",
        "method",
        "status",
        "payl",
        "timer",
        "apps",
        "role",
        "state",
        "A",
        "B",
        "C",
        "x",
        "T1",
        "{",
        "}",
        "(",
        ")",
        ":",
        ",",
        "->",
        "=",
        "==",
        "!=",
        "<",
        "<=",
        ">",
        ">=",
        "!",
        "&&",
        "||",
        "\"s\"",
        "42",
        "-7",
        "99999999999999999999",
        "int",
        "string",
        "bool",
        "bytes",
        "#c\n",
        "\n",
    ];
    let mut rng = Rng(42);
    for _ in 0..3000 {
        let n = rng.below(60);
        let mut s = String::from(if rng.below(4) == 0 { "" } else { "service s " });
        for _ in 0..n {
            s.push_str(tokens[rng.below(tokens.len())]);
            s.push(' ');
        }
        exercise(&s);
    }
}

#[test]
fn grammar_shaped_random_contracts() {
    // Syntactically valid contracts with random names and guards: exercises the checker and
    // the nondeterminism test on odd but parseable input.
    let names = ["A", "B", "C", "Idle", "Done", "R", "S", "x", "y", "p"];
    let atoms = [
        "msg.method == OK",
        "msg.method == BYE",
        "msg.sips.role == R",
        "msg.sips.role == null",
        "msg.sips.x == null",
        "p != null",
        "p.state == A",
        "p.role == S",
        "msg.status < 300",
        "msg.status >= 200",
        "msg.payl == \"q\"",
        "msg.sips.y.x.state == B",
        "true",
        "false",
        "msg.sips.flag",
        "x == y",
        "msg.sips.x.role == R",
    ];
    let mut rng = Rng(7);
    for _ in 0..400 {
        let mut s = String::from("service s\nrole R holds state { x: session S once  flag: bool }\nrole S { y: session R once state via y }\nstates { initial A B C final Done }\n");
        for t in 0..1 + rng.below(6) {
            let from = names[rng.below(5)];
            let to = if rng.below(5) == 0 { "same" } else { names[rng.below(5)] };
            let mut guard = String::new();
            for i in 0..1 + rng.below(6) {
                if i > 0 {
                    guard.push_str([" && ", " || ", " && !"][rng.below(3)]);
                }
                let a = atoms[rng.below(atoms.len())];
                if rng.below(3) == 0 {
                    guard.push_str(&format!("({a})"));
                } else {
                    guard.push_str(a);
                }
            }
            s.push_str(&format!(
                "transition T{t}: {from} -> {to}\n  let p = session(msg.payl)\n  when {guard}\n  handles msg.sips, p\n  moves p -> {}\n",
                names[rng.below(5)]
            ));
        }
        exercise(&s);
    }
}

#[test]
fn pathological_nesting_and_sizes() {
    let head = "service s\nrole C holds state { }\nstates { initial A final B }\ntransition T: A -> B\n  when ";
    let tail = "\n  handles msg.sips\n";
    // Nesting within the limits parses and checks.
    let ok = format!("{head}{}msg.method == OK{}{tail}", "(".repeat(60), ")".repeat(60));
    assert!(tandem_contract::parse(&ok).is_ok());
    exercise(&ok);
    // Deeper nesting is an error, not a stack overflow.
    let deep = format!("{head}{}msg.method == OK{}{tail}", "(".repeat(100_000), ")".repeat(100_000));
    let errs = tandem_contract::parse(&deep).unwrap_err();
    assert!(errs[0].message.contains("nested too deeply"), "{errs:?}");
    let deep_not = format!("{head}{}true{tail}", "!".repeat(100_000));
    assert!(tandem_contract::parse(&deep_not).unwrap_err()[0].message.contains("too long"));
    let long_and = format!("{head}{}{tail}", vec!["msg.method == OK"; 20_000].join(" && "));
    assert!(tandem_contract::parse(&long_and).unwrap_err()[0].message.contains("too long"));
    // A long but acceptable chain, and a guard with a huge DNF (a warning, not a hang).
    let chain = format!("{head}{}{tail}", vec!["msg.status != 1"; 400].join(" && "));
    exercise(&chain);
    let clauses: Vec<String> = (0..12).map(|i| format!("(msg.status == {i} || msg.payl == \"{i}\")")).collect();
    let wide = format!("{head}{}{tail}", clauses.join(" && "));
    assert!(warnings(&wide).iter().any(|w| w.contains("too complex")), "{:?}", warnings(&wide));
    // Odd inputs.
    for s in [
        "",
        "#",
        "\n\n\n",
        "service",
        "service s",
        "service s\n",
        "\u{feff}service s",
        "service é",
        "service s states {",
        "\0",
        "\"",
        "service s transition",
    ] {
        exercise(s);
    }
    let long_name = format!("service {}\nstates {{ initial {} final B }}\n", "n".repeat(100_000), "a".repeat(50_000));
    exercise(&long_name);
}

#[test]
fn spans_of_diagnostics_stay_in_bounds_for_default_spans() {
    // A diagnostic with a default span renders without panicking.
    let d = tandem_contract::Diagnostic::error("x", Span::default());
    assert!(tandem_contract::render(&d, "f", "abc").starts_with("f:1:1: error: x\n"));
}
