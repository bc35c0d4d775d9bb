//! A file a part at a time: the front end parses a source file in parts
//! of whole items ([`split`]) and never holds every item's syntax tree at
//! once (`compile`).

use crate::error::{Based, Error};
use crate::limits::Cursor;
use offload_ir::{Diagnostics, Module};
use std::borrow::Cow;
use std::sync::Arc;

/// The least a part of [`split`] holds, in bytes of text: large enough that
/// a file has few parts, small enough that a part's syntax tree takes a
/// few megabytes.
pub const PART_BYTES: usize = 64 << 10;

/// Where a text that passed [`crate::limits::check`] divides into parts of whole items,
/// each starting at a line start and (but for the last) at least
/// [`PART_BYTES`] long: a part ends after a `}` or `;` that ends an item
/// (outside every bracket) when nothing but blanks or a `//` comment
/// follows on its line. The parts cover the text in order. The front end
/// parses a part at a time, so a file of many kernels never holds all
/// their syntax trees at once.
pub fn split(src: &str) -> Vec<std::ops::Range<usize>> {
    let mut cur = Cursor {
        b: src.as_bytes(),
        i: 0,
        line: 1,
        line_start: 0,
    };
    let mut parts = Vec::new();
    let mut start = 0;
    let mut depth = 0usize;
    while let Some(&c) = cur.b.get(cur.i) {
        match c {
            b'\n' => cur.newline(),
            b'/' if cur.peek(1) == Some(b'/') => cur.skip_line_comment(),
            b'/' if cur.peek(1) == Some(b'*') => cur.skip_block_comment(),
            b'"' => cur.skip_string(),
            b'\'' => cur.skip_quote(),
            b'(' | b'[' | b'{' => {
                depth += 1;
                cur.i += 1;
            }
            b')' | b']' | b'}' | b';' => {
                let ends = (c == b'}' && depth == 1) || (c == b';' && depth == 0);
                depth = depth.saturating_sub(usize::from(c != b';'));
                cur.i += 1;
                if ends {
                    // The rest of the line: blanks, then its end or a `//`.
                    let rest = &cur.b[cur.i..];
                    let blank = rest
                        .iter()
                        .take_while(|&&b| b == b' ' || b == b'\t' || b == b'\r')
                        .count();
                    let after = &rest[blank..];
                    let end = if after.is_empty() {
                        Some(cur.b.len())
                    } else if after[0] == b'\n' || after.starts_with(b"//") {
                        after
                            .iter()
                            .position(|&b| b == b'\n')
                            .map(|k| cur.i + blank + k + 1)
                    } else {
                        None
                    };
                    if let Some(end) = end.filter(|&e| e - start >= PART_BYTES) {
                        parts.push(start..end);
                        start = end;
                    }
                }
            }
            _ => cur.i += 1,
        }
    }
    if start < src.len() {
        parts.push(start..src.len());
    }
    parts
}

/// Parse `src` (after checking it against the limits) and lower it, a part
/// of whole items at a time ([`split`]): the classes and methods of every
/// part that has any first, then each part's functions, then each part's
/// bodies, parsing a part again for each step (a file of one part is
/// parsed once: for the kernels of `examples/kernels`, compiling took
/// 1.5–2x as long parsed for each step). A syntax tree takes ~13 KB
/// for a three-line kernel (~5 KB for its signature alone), so a file of
/// 60,000 kernels held at once needed ~900 MB (now ~400 MB, mostly the
/// module and its verification; parsing twice costs about half as much
/// time again). Call on a stack of [`crate::limits::STACK_BYTES`], on a
/// thread whose proc-macro2 spans are its own (not inside a procedural
/// macro).
pub(crate) fn compile(file: &str, src: &str) -> Result<Module, Diagnostics> {
    let file: Arc<str> = file.into();
    let fail = |e: Error| Diagnostics(vec![e.diagnostic(&file, None)]);
    crate::limits::check(src).map_err(fail)?;
    let parts = split(src);
    let lines_before = {
        let mut lines = 0u32;
        let mut at = 0;
        parts
            .iter()
            .map(|r| {
                lines += src.as_bytes()[at..r.start]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count() as u32;
                at = r.start;
                lines
            })
            .collect::<Vec<_>>()
    };
    let parse = |k: usize| {
        let r = parts[k].clone();
        let _based = Based::at(r.start as u32, lines_before[k]);
        syn::parse_file(&src[r])
            .map_err(Error::from)
            .and_then(crate::ranges::rewrite)
            .map_err(fail)
    };
    // A file of one part is parsed once, and its tree kept for every step
    // (a part's tree is a few megabytes at most); a file of many parts is
    // parsed again for each step.
    let single = if parts.len() == 1 {
        Some(parse(0)?)
    } else {
        None
    };
    let part_at = |k: usize| -> Result<Cow<'_, syn::File>, Diagnostics> {
        match &single {
            Some(f) => Ok(Cow::Borrowed(f)),
            None => parse(k).map(Cow::Owned),
        }
    };
    // The classes and methods from every part, the methods without their
    // bodies; then the free functions, a part at a time (in file order,
    // after the methods, as `crate::items::declare` numbers them).
    let mut skeleton = syn::File {
        shebang: None,
        attrs: Vec::new(),
        items: Vec::new(),
    };
    for k in 0..parts.len() {
        // A part without the words holds neither (a cheap look: most of a
        // file of many kernels is parsed twice, not three times).
        let text = &src[parts[k].clone()];
        if !text.contains("struct") && !text.contains("impl") {
            continue;
        }
        let (items, attrs): (Vec<syn::Item>, Vec<syn::Attribute>) = match part_at(k)? {
            Cow::Owned(p) => (p.items, p.attrs),
            Cow::Borrowed(p) => (
                p.items
                    .iter()
                    .filter(|i| !matches!(i, syn::Item::Fn(_)))
                    .cloned()
                    .collect(),
                p.attrs.clone(),
            ),
        };
        for mut item in items {
            match &mut item {
                syn::Item::Fn(_) => continue,
                syn::Item::Impl(i) => {
                    for m in &mut i.items {
                        if let syn::ImplItem::Fn(m) = m {
                            m.block.stmts = Vec::new();
                        }
                    }
                }
                _ => {}
            }
            skeleton.items.push(item);
        }
        skeleton.attrs.extend(attrs);
    }
    let mut decls = crate::items::declare(&skeleton, &file).map_err(fail)?;
    for k in 0..parts.len() {
        let part = part_at(k)?;
        let _based = Based::at(parts[k].start as u32, lines_before[k]);
        crate::items::declare_fns(&mut decls, &part).map_err(fail)?;
    }
    let mut module = decls.module.clone();
    let mut errors = Vec::new();
    for (k, r) in parts.iter().enumerate() {
        let part = part_at(k)?;
        let _based = Based::at(r.start as u32, lines_before[k]);
        for (name, body) in bodies(&part) {
            let Some(&f) = decls.by_name.get(&name) else {
                continue;
            };
            match crate::lower(&decls, f, body) {
                Ok(func) => module.funcs[f.index()] = func,
                Err(e) => errors.push((f, e.diagnostic(&file, Some(&name)))),
            }
        }
    }
    if errors.is_empty() {
        Ok(module)
    } else {
        errors.sort_by_key(|(f, _)| *f);
        Err(Diagnostics(errors.into_iter().map(|(_, d)| d).collect()))
    }
}

/// The bodies of a part's functions and methods, by the function's name in
/// the module (`Class.method` for a method).
fn bodies(part: &syn::File) -> Vec<(String, &syn::Block)> {
    let mut out = Vec::new();
    for item in &part.items {
        match item {
            syn::Item::Fn(f) => out.push((f.sig.ident.to_string(), &*f.block)),
            syn::Item::Impl(i) => {
                let syn::Type::Path(p) = &*i.self_ty else {
                    continue;
                };
                let Some(class) = p.path.get_ident() else {
                    continue;
                };
                for m in &i.items {
                    if let syn::ImplItem::Fn(m) = m {
                        out.push((format!("{class}.{}", m.sig.ident), &m.block));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parts cover the text in order, start at line starts, are at least
    /// [`PART_BYTES`] long but for the last, and never cut an item, a
    /// string or a comment.
    #[test]
    fn parts_are_whole_items_at_line_starts() {
        let item = "#[kernel]\nfn k(i: i32, o: &mut [i32]) { let s = \"}\n;\"; /* }\n; */ o[i] = 1; }  // ends\nstruct A; struct B { x: i32 }\n";
        let src = item.repeat(3 * PART_BYTES / item.len() + 1);
        let parts = split(&src);
        assert!(parts.len() >= 3, "{}", parts.len());
        let mut at = 0;
        for (k, r) in parts.iter().enumerate() {
            assert_eq!(r.start, at);
            assert!(r.start == 0 || src.as_bytes()[r.start - 1] == b'\n');
            assert!(k + 1 == parts.len() || r.len() >= PART_BYTES);
            let text = &src[r.clone()];
            assert!(
                text.starts_with("#[kernel]") || text.starts_with("struct A;"),
                "part {k}"
            );
            at = r.end;
        }
        assert_eq!(at, src.len());
        assert_eq!(split("fn f() {}").len(), 1);
        assert!(split("").is_empty());
    }

    /// A file of many parts ([`split`]) compiles as one: a kernel
    /// calls a function and uses a class defined parts later, and an error
    /// in a late part is placed on its own line, column and bytes.
    #[test]
    fn a_file_of_many_parts_compiles_as_one_and_places_its_errors() {
        let mut src = String::from(
            "#[kernel]\nfn first(i: i32, out: &mut [f32]) {\n    let p = P { x: 2.0 };\n    out[i] = last(p.scaled(i as f32));\n}\n",
        );
        let mut k = 0;
        while src.len() < 3 * PART_BYTES {
            src.push_str(&format!(
                "#[kernel]\nfn k{k}(i: i32, out: &mut [i32]) {{\n    out[i] = i + {k};\n}}\n"
            ));
            k += 1;
        }
        src.push_str("struct P {\n    x: f32,\n}\nimpl P {\n    fn scaled(&self, by: f32) -> f32 {\n        self.x * by\n    }\n}\nfn last(v: f32) -> f32 {\n    v + 1.0\n}\n");
        assert!(split(&src).len() >= 3);
        let m = crate::compile_verified("parts.ofk", &src).unwrap();
        assert!(m.func_named("first").is_some() && m.func_named("P.scaled").is_some());
        // An error in the last part: a name no one defined.
        let bad = format!("{src}fn broken() -> f32 {{\n    1.0 + nope\n}}\n");
        let line = bad.lines().count() as u32 - 1;
        let d = &crate::compile_verified("parts.ofk", &bad).unwrap_err().0[0];
        assert_eq!((d.span.line, d.span.col), (line, 11), "{d}");
        assert_eq!(
            &bad[d.span.start as usize..d.span.end as usize],
            "nope",
            "{d}"
        );
    }
}
