//! The core's top-level modules form no cycle (issue 21): each can be read, and tested, from the bottom up.
//! A module's edges are the `crate::<module>` paths its files name outside comments and test modules (a
//! folder module counts as one); a cycle fails with the references that close it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The text a module's dependencies are read from: comments and `#[cfg(test)] mod tests` cut away.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules `code` names: `crate::m::...` and the first names of a `crate::{m, n::x}` group.
fn references(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start => {
                        out.insert(ident_at(&group[i..]).to_string());
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident_at(rest).to_string());
        }
    }
    out
}

fn graph(src: &Path) -> Graph {
    let mut files: BTreeMap<String, Vec<std::path::PathBuf>> = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).unwrap();
                let top = rel.iter().next().unwrap().to_string_lossy();
                let top = top.trim_end_matches(".rs").to_string();
                if top != "lib" {
                    files.entry(top).or_default().push(path);
                }
            }
        }
    }
    let mut g = Graph::new();
    for (m, paths) in &files {
        let deps = g.entry(m.clone()).or_default();
        for p in paths {
            let code = code_of(&std::fs::read_to_string(p).unwrap());
            deps.extend(
                references(&code)
                    .into_iter()
                    .filter(|d| d != m && files.contains_key(d)),
            );
        }
    }
    g
}

/// Strongly connected components of more than one module (Tarjan).
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(st: &mut State<'a>, v: &'a str) {
        let n = st.index.len();
        st.index.insert(v, n);
        st.low.insert(v, n);
        st.stack.push(v);
        let g = st.g;
        for w in g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !st.index.contains_key(w) {
                visit(st, w);
                let lw = st.low[w];
                let lv = st.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if st.stack.contains(&w) {
                let iw = st.index[w];
                let lv = st.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if st.low[v] == st.index[v] {
            let mut component = Vec::new();
            while let Some(w) = st.stack.pop() {
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                st.found.push(component);
            }
        }
    }
    let mut st = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in g.keys() {
        if !st.index.contains_key(v.as_str()) {
            visit(&mut st, v);
        }
    }
    st.found
}

#[test]
fn the_checker_reads_paths_and_groups_and_sees_a_cycle() {
    let refs =
        references("use crate::a::X;\nuse crate::{b, c::{D, e::F}, g::H};\nlet x = crate::i::f();");
    let want: BTreeSet<String> = ["a", "b", "c", "g", "i"].map(String::from).into();
    assert_eq!(refs, want);
    assert!(references(&code_of("// crate::z::W\nfn f() {}")).is_empty());
    let mut g = Graph::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")] {
        g.entry(a.into()).or_default().insert(b.into());
        g.entry(b.into()).or_default();
    }
    assert_eq!(cycles(&g), vec![vec!["a", "b", "c"]]);
}

#[test]
fn the_core_modules_form_no_cycle() {
    let g = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(g["scan"].contains("summary") && g["report"].contains("summary"));
    let found = cycles(&g);
    let explain: Vec<String> = found
        .iter()
        .flat_map(|c| {
            c.iter().map(|m| {
                let inside: Vec<&String> = g[m].iter().filter(|d| c.contains(d)).collect();
                format!("{m} -> {inside:?}")
            })
        })
        .collect();
    assert!(
        found.is_empty(),
        "module cycles: {found:?}\n{}",
        explain.join("\n")
    );
}
