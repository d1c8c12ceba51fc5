//! Parser: syntax errors (position and message), spans, `same`, rendering.

mod common;

use common::*;
use tandem_contract::ast::*;
use tandem_contract::{parse, render, Diagnostic, Severity};

/// The single syntax error of `src`.
#[track_caller]
fn syntax_error(src: &str) -> Diagnostic {
    let mut errs = parse(src).expect_err("should not parse");
    assert_eq!(errs.len(), 1, "{errs:#?}");
    errs.remove(0)
}

#[track_caller]
fn at(d: &Diagnostic) -> (u32, u32) {
    (d.span.line, d.span.col)
}

#[test]
fn syntax_error_positions_are_exact() {
    let src = "service s\nstates {\n  initial A\n  final B\n}\ntransition T: A -> B\n  when msg.method == INVITE &&\n  handles msg.sips\n";
    let d = syntax_error(src);
    assert_eq!(at(&d), (8, 3));
    assert_eq!(d.message, "expected an expression, found keyword `handles`");
    assert_eq!(&src[d.span.start..d.span.end], "handles");

    let d = syntax_error("service s\n\ntransition T A -> B when msg.method == OK\n");
    assert_eq!(at(&d), (3, 14));
    assert_eq!(d.message, "expected `:`, found `A`");

    let d = syntax_error("service s\nrole C holds state {\n  x: sesion C\n}\n");
    assert_eq!(at(&d), (3, 6));
    assert_eq!(d.message, "expected a type (`string`, `int`, `bool`, `bytes` or `session ROLE`), found `sesion`");
    assert_eq!(d.notes, ["did you mean `session`?"]);

    let d = syntax_error("service s\nstates { initial A final B }\ntransition T: A -> B\n  when msg.method = INVITE\n");
    assert_eq!(at(&d), (4, 19));
    assert!(d.message.starts_with("expected `.`, a comparison operator"), "{}", d.message);
    assert!(d.notes.contains(&"use `==` to compare".to_string()));

    let d = syntax_error("service s\nstates { initial A final B }\ntransition T: A -> B\n  when msg.method == OK\n  hadles msg.sips\n");
    assert_eq!(at(&d), (5, 3));
    assert_eq!(d.message, "expected `.`, `&&`, `||`, `handles`, `moves`, `role`, `states`, `transition` or end of file, found `hadles`");
    assert_eq!(d.notes, ["did you mean `handles`?"]);

    let d = syntax_error("service s\nstates { initial state }\n");
    assert_eq!(at(&d), (2, 18));
    assert_eq!(d.message, "expected a name, found keyword `state`");

    let d = syntax_error("service s\nstates { initial A final B }\ntransition T: A -> B when msg.payl == \"abc\n");
    assert_eq!(at(&d), (3, 39));
    assert!(d.message.starts_with("unterminated string"));

    let d = syntax_error("service s\nstates { initial A final B }\ntransition T: A -> B when msg.status == 1 == 2\n");
    assert_eq!(at(&d), (3, 43));
    assert!(d.notes.iter().any(|n| n.contains("cannot be chained")));

    let d = syntax_error("service s\nstates { initial A final B }\ntransition T: A -> B\n  when (msg.status == 1\n");
    assert_eq!(at(&d), (5, 1));
    assert_eq!(d.message, "expected `)`, `&&` or `||`, found end of file");

    let d = syntax_error("");
    assert_eq!(at(&d), (1, 1));
    assert_eq!(d.message, "expected `service`, found end of file");

    // Columns count characters, not bytes.
    let d = syntax_error("service s # é é é\nstates { initial A final B } é\n");
    assert_eq!(at(&d), (2, 30));
}

#[test]
fn build_errors_have_spans() {
    let d = syntax_error("service s\nstates { initial A final B }\ntransition T: A -> B\n  when msg.methd == OK\n");
    assert_eq!(d.message, "unknown message field `msg.methd`");
    assert_eq!(at(&d), (4, 12));
    assert!(d.notes.iter().any(|n| n == "did you mean `msg.method`?"));

    let d = syntax_error("service s\nstates { initial A final B }\ntransition T: A -> B\n  when msg.status == 99999999999999999999\n");
    assert!(d.message.contains("out of range"));
    assert_eq!(at(&d), (4, 22));

    let d = syntax_error("service s\nstates { initial A final B }\ntransition T: A -> B\n  when msg.payl == \"a\\qb\"\n");
    assert_eq!(d.message, "unknown escape `\\q` in string");
    assert_eq!(at(&d), (4, 22));

    let d = syntax_error("service s\nrole C holds state { x: int state via x state via x }\n");
    assert_eq!(d.message, "a role has at most one `state via`");
}

#[test]
fn spans_cover_the_source_text() {
    let src = dating_source();
    let m = parse(&src).unwrap();
    let text = |s: Span| &src[s.start..s.end];
    let line_col = |offset: usize| {
        let before = &src[..offset];
        let line = before.matches('\n').count() as u32 + 1;
        let col = before.rsplit('\n').next().unwrap().chars().count() as u32 + 1;
        (line, col)
    };
    let check_ident = |i: &Ident| {
        assert_eq!(text(i.span), i.name, "{i:?}");
        assert_eq!((i.span.line, i.span.col), line_col(i.span.start), "{i:?}");
    };
    check_ident(&m.service);
    for r in &m.roles {
        check_ident(&r.name);
        assert!(text(r.span).starts_with("role ") && text(r.span).ends_with('}'));
        for a in &r.attributes {
            check_ident(&a.name);
            assert!(text(a.span).starts_with(&a.name.name));
            assert!(!text(a.span).ends_with(char::is_whitespace));
        }
    }
    for s in &m.states {
        check_ident(&s.name);
    }
    for t in &m.transitions {
        check_ident(&t.name);
        t.from.iter().for_each(check_ident);
        if !t.stays {
            check_ident(&t.to);
        } else {
            assert_eq!(text(t.to.span), "same");
        }
        assert!(text(t.span).starts_with("transition "));
        assert!(!text(t.span).ends_with(char::is_whitespace), "{:?}", text(t.span));
        assert_eq!((t.span.line, t.span.col), line_col(t.span.start));
        let g = t.guard.span();
        assert!(text(g).starts_with("msg.method == "), "{}", text(g));
        assert_eq!((g.line, g.col), line_col(g.start));
        for h in &t.handles {
            assert_eq!(text(h.span), h.to_string());
            assert_eq!((h.span.line, h.span.col), line_col(h.span.start));
            h.path.iter().for_each(check_ident);
        }
        for mv in &t.moves {
            assert_eq!(text(mv.target.span), mv.target.to_string());
            check_ident(&mv.to);
            assert_eq!(text(mv.span), format!("{} -> {}", mv.target, mv.to.name));
        }
        for l in &t.lets {
            check_ident(&l.name);
            assert_eq!(text(l.value.span()), "session(msg.payl)");
            assert_eq!(text(l.span), "let p2t = session(msg.payl)");
        }
    }
    let t7 = m.transition("T7").unwrap();
    assert_eq!((t7.name.span.line, t7.name.span.col), line_col(src.find("transition T7").unwrap() + 11));
    // The guard's last operand ends the guard's span.
    assert!(text(t7.guard.span()).ends_with("p2t.state == TalkingWithMS"));
}

#[test]
fn same_with_one_and_several_sources() {
    let src = "service s\nrole C holds state { }\nstates { initial A B final Z }\n\
               transition T: A -> same when msg.method == OK\n\
               transition U: A, B -> same when msg.method == BYE\n\
               transition V: A -> B when msg.method == ACK\n";
    let m = parse(src).unwrap();
    let t = m.transition("T").unwrap();
    assert!(t.stays);
    assert_eq!(t.to.name, "A");
    let u = m.transition("U").unwrap();
    assert!(u.stays);
    assert_eq!(u.to.name, "A");
    assert_eq!(u.target_for("B"), "B");
    let v = m.transition("V").unwrap();
    assert!(!v.stays);
    assert_eq!(v.target_for("A"), "B");
}

#[test]
fn bare_names_and_variables() {
    let src = "service s\nrole C holds state { x: session C }\nstates { initial A final B }\n\
               transition T: A -> B\n  let v = msg.sips.x\n  when v != null && v.state == A && v.role == C && msg.method == OK && (true || !false) && msg.status >= -1\n  handles msg.sips, v\n  moves v -> B\n";
    let m = parse(src).unwrap();
    let t = &m.transitions[0];
    assert_eq!(t.guard.to_string(), "v != null && v.state == A && v.role == C && msg.method == OK && (true || !false) && msg.status >= -1");
    // `v` is a variable (bound by let), `A`, `C`, `OK` are bare names.
    fn collect<'a>(e: &'a Expr, names: &mut Vec<&'a str>, vars: &mut Vec<String>) {
        match e {
            Expr::Name(i) => names.push(&i.name),
            Expr::Nav(n) => vars.push(n.to_string()),
            Expr::And(a, b) | Expr::Or(a, b) | Expr::Cmp(a, _, b) => {
                collect(a, names, vars);
                collect(b, names, vars);
            }
            Expr::Not(a, _) | Expr::SessionOf(a, _) => collect(a, names, vars),
            _ => {}
        }
    }
    let (mut names, mut vars) = (vec![], vec![]);
    collect(&t.guard, &mut names, &mut vars);
    assert_eq!(names, ["A", "C", "OK"]);
    assert_eq!(vars, ["v", "v.state", "v.role", "msg.method", "msg.status"]);
    assert!(matches!(&t.handles[1].root, NavRoot::Var(v) if v.name == "v"));
    // Comments, commas and one-line layouts are fine.
    let compact = "service s # c\nrole C holds state { a: int, b: bool once, }\nstates { initial A, final B }\ntransition T: A -> B when msg.method == OK handles msg.sips # end";
    assert!(parse(compact).is_ok());
}

#[test]
fn render_format_is_exact() {
    let src = "service s\nrole C holds state { }\nstates { initial A final B }\ntransition T: A -> Bee\n  when msg.method == OK\n  handles msg.sips\n";
    let d = tandem_contract::check(&parse(src).unwrap()).into_iter().find(|d| d.message.contains("Bee")).unwrap();
    assert_eq!(
        render(&d, "svc.machine", src),
        "svc.machine:4:20: error: unknown state `Bee`\n\
         \x20  4 | transition T: A -> Bee\n\
         \x20    |                    ^^^\n\
         \x20    = note: the states are `A` and `B`\n"
    );
    let w = Diagnostic { severity: Severity::Warning, message: "w".into(), span: d.span, notes: vec![] };
    assert!(render(&w, "f", src).starts_with("f:4:20: warning: w\n"));
    // Tabs before the span are kept so the carets line up.
    let tabbed = "service s\n\tstates x\n";
    let e = syntax_error(tabbed);
    assert_eq!(render(&e, "t", tabbed).lines().nth(2).unwrap(), "     | \t       ^");
}
