//! Diagrams of the dating machine.

mod common;

use common::*;
use tandem_contract::diagram::{self, DiagramError, Format};

fn machine() -> tandem_contract::ast::Machine {
    tandem_contract::parse(&dating_source()).unwrap()
}

#[test]
fn dot_has_states_edges_and_the_dashed_peer_edges() {
    let dot = diagram::dot(&machine());
    assert!(dot.starts_with("digraph \"dating\" {\n"), "{dot}");
    assert!(dot.ends_with("}\n"));
    // Initial state entered from a black dot, final state as a double circle.
    assert!(dot.contains("  \"__start0\" [shape=point, width=0.15, label=\"\"];\n  \"__start0\" -> \"Idle\";\n"));
    assert!(dot.contains("  \"Done\" [shape=doublecircle, style=solid];\n"));
    // Transitions, merged when they share source and target.
    assert!(dot.contains("  \"InvitingMS\" -> \"ConnectingMS2Caller\" [label=\"T2\"];\n"));
    assert!(dot.contains("  \"InvitingMS\" -> \"Done\" [label=\"T3, T10\"];\n"));
    assert!(dot.contains("  \"TalkingWithMS\" -> \"TalkingWithMS\" [label=\"T6\"];\n"));
    for s in ["Pairing", "TalkingWithPeer", "Terminating"] {
        assert!(dot.contains(&format!("  \"{s}\" -> \"{s}\" [label=\"T9\"];\n")), "T9 self-loop on {s}");
    }
    // The dashed edges of `moves`.
    assert!(dot.contains("  \"TalkingWithMS\" -> \"Pairing\" [label=\"T7 (p2t)\", style=dashed];\n"), "{dot}");
    assert!(dot.contains("  \"TalkingWithPeer\" -> \"Terminating\" [label=\"T11 (p2t)\", style=dashed];\n"));
    assert_eq!(dot.matches("style=dashed").count(), 4);
}

#[test]
fn mermaid_flowchart() {
    let mm = diagram::mermaid(&machine());
    assert!(mm.contains("flowchart LR\n"));
    assert!(mm.contains("  s_Done(((Done)))\n"));
    assert!(mm.contains("  start0(( )) --> s_Idle\n"));
    assert!(mm.contains("  s_InvitingMS -->|\"T3, T10\"| s_Done\n"));
    assert!(mm.contains("  s_TalkingWithMS -.->|\"T7 (p2t)\"| s_Pairing\n"), "{mm}");
}

#[test]
fn formats_parse() {
    assert_eq!("dot".parse::<Format>().unwrap(), Format::Dot);
    assert_eq!("Mermaid".parse::<Format>().unwrap(), Format::Mermaid);
    assert_eq!("svg".parse::<Format>().unwrap(), Format::Svg);
    let err = "png".parse::<Format>().unwrap_err();
    assert_eq!(err.to_string(), "unknown diagram format `png` (expected dot, mermaid or svg)");
    assert_eq!(diagram::render(&machine(), Format::Dot).unwrap(), diagram::dot(&machine()));
}

fn graphviz_installed() -> bool {
    std::process::Command::new("dot").arg("-V").output().is_ok_and(|o| o.status.success())
}

#[test]
fn svg_via_graphviz() {
    let result = diagram::svg(&machine());
    if !graphviz_installed() {
        eprintln!("SKIP svg_via_graphviz: Graphviz `dot` is not installed (apt-get install graphviz)");
        assert!(matches!(result, Err(DiagramError::DotNotFound)), "{result:?}");
        return;
    }
    let svg = result.expect("dot -Tsvg");
    assert!(svg.contains("<svg"), "{svg}");
    assert!(svg.contains("T7 (p2t)"));
    assert!(svg.contains("stroke-dasharray"), "dashed edges are drawn dashed");
}
