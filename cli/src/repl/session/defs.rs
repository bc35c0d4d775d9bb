//! Definitions: defining and redefining classes, kernels and functions,
//! the ones that wait for a name defined later, and `:load`.

use super::*;

impl Session {
    /// Define (or redefine) every item of `text`, which came from `origin`
    /// starting at line `line`.
    pub(super) fn define(
        &mut self,
        text: &str,
        origin: &str,
        line: u32,
        out: &mut String,
    ) -> Result<()> {
        // Items are split textually; the whole session's text is then parsed
        // and verified at once (a definition may use any other), and each
        // error is shown in the definition it is in.
        let padded = format!("{}{}", "\n".repeat(line as usize - 1), text);
        let items = input::items(&padded);
        if items.is_empty() {
            bail!("{origin}: no class, kernel or func definition found");
        }
        let mut defs = self.defs.clone();
        // Definitions waiting for a name come along, unless redefined now.
        let mut waiting: Vec<Def> = Vec::new();
        for (d, _) in &self.pending {
            let replaced = items
                .iter()
                .any(|i| i.name == d.item.name && same_namespace(i.kind, d.item.kind));
            if !replaced {
                waiting.push(d.clone());
            }
        }
        let mut said = Vec::new();
        let mut fresh = Vec::new();
        for item in items {
            let old = defs
                .iter()
                .position(|d| d.item.name == item.name && same_namespace(d.item.kind, item.kind));
            let verb = if old.is_some() {
                "redefined"
            } else {
                "defined"
            };
            said.push((verb, item.kind, item.name.clone()));
            fresh.push(item.name.clone());
            let def = Def {
                item,
                origin: origin.to_string(),
                compiled: false,
            };
            match old {
                Some(i) => defs[i] = def,
                None => defs.push(def),
            }
        }
        let first_new = defs.len();
        defs.extend(waiting);
        // Load; definitions whose only errors are names not defined yet
        // (and that were not loaded before) wait for them, and the rest is
        // loaded again without them, until it loads or fails otherwise.
        let mut pending: Vec<(Def, String)> = Vec::new();
        let module = loop {
            if defs.is_empty() {
                break None;
            }
            match load_defs_diag(&self.rt, &defs) {
                Ok(m) => break Some(m),
                Err(fail) => {
                    let waits: Vec<(usize, String)> = fail.unresolved();
                    let movable = !waits.is_empty()
                        && fail.all_unresolved()
                        && waits
                            .iter()
                            .all(|(i, _)| *i >= first_new || fresh.contains(&defs[*i].item.name));
                    if !movable {
                        bail!("{}", fail.text);
                    }
                    let mut idx: Vec<usize> = waits.iter().map(|(i, _)| *i).collect();
                    idx.sort_unstable();
                    idx.dedup();
                    for &i in idx.iter().rev() {
                        let why: Vec<&str> = waits
                            .iter()
                            .filter(|(j, _)| *j == i)
                            .map(|(_, m)| m.as_str())
                            .collect();
                        pending.push((defs.remove(i), why.join(", ")));
                    }
                }
            }
        };
        // Objects are instances of a module's classes: make the variables'
        // objects again from the new definitions.
        let (vars, lost) = carry_over(&self.rt, &self.vars, &self.rt, module.as_ref())?;
        let was_pending: Vec<String> = self
            .pending
            .iter()
            .map(|(d, _)| d.item.name.clone())
            .collect();
        self.defs = defs;
        self.module = module;
        self.vars = vars;
        for (verb, kind, name) in said {
            match pending.iter().find(|(d, _)| d.item.name == name) {
                Some((_, why)) => {
                    let _ = writeln!(
                        out,
                        "{verb} {kind} {name}, waiting for what it names: {why} (it loads once that is defined)"
                    );
                }
                None => {
                    let _ = writeln!(out, "{verb} {kind} {name}");
                }
            }
        }
        for d in &self.defs {
            if was_pending.contains(&d.item.name) {
                let _ = writeln!(
                    out,
                    "loaded {} {} (what it was waiting for is defined)",
                    d.item.kind, d.item.name
                );
            }
        }
        pending.reverse();
        self.pending = pending;
        lost_note(&lost, out);
        Ok(())
    }

    /// Where line `line` of the session's combined source came from:
    /// `FILE:LINE` of its definition.
    pub(super) fn origin_of(&self, line: u32) -> Option<String> {
        let mut first = 1u32;
        for d in &self.defs {
            let n = d.item.text.lines().count() as u32;
            if line < first + n {
                // Bytecode compiled from source has no line of its own in
                // a file: name the source definition.
                if d.compiled {
                    return Some(format!("compiled from {}:{}", d.origin, d.item.line));
                }
                return Some(format!("{}:{}", d.origin, d.item.line + (line - first)));
            }
            first += n;
        }
        None
    }

    /// Trace lines name lines of the combined source (`(FILE:LINE:COL,
    /// bci B)`): name the definition's file and line instead.
    pub(super) fn source_lines(&self, text: &str) -> String {
        text.lines()
            .map(|l| {
                if let Some(traced) = self.source_trace_line(l) {
                    return traced;
                }
                let Some(t) = super::source::TraceLine::parse(l) else {
                    return l.to_string();
                };
                match self.origin_of(t.line) {
                    Some(o) => format!("{} ({o}, bci {})", t.head, t.bci),
                    None => l.to_string(),
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub(super) fn load(&mut self, path: &str, out: &mut String) -> Result<()> {
        if path.is_empty() {
            bail!("usage: :load FILE.obc (bytecode) or :load FILE.ofk (source)");
        }
        let p = std::path::Path::new(path);
        let text = offload::diagnostics::read_source(p).map_err(ReplError::Entry)?;
        if p.extension().is_some_and(|e| e == offload::lang::EXTENSION) {
            self.define_source(&text, path, 1, out)
        } else {
            self.define(&text, path, 1, out)
        }
    }

    /// The definitions still waiting for a name, as `kind name (why)`.
    pub fn waiting(&self) -> Vec<String> {
        self.pending
            .iter()
            .map(|(d, why)| format!("{} {}: {why}", d.item.kind, d.item.name))
            .collect()
    }

    pub(super) fn defs_text(&self, out: &mut String) {
        if self.defs.is_empty() && self.pending.is_empty() {
            out.push_str("nothing defined\n");
            return;
        }
        let mut t = offload::table::new(["kind", "name", "from", "state"]);
        for d in &self.defs {
            t.add_row([
                d.item.kind.to_string(),
                d.item.name.clone(),
                format!("{}:{}", d.origin, d.item.line),
                "loaded".to_string(),
            ]);
        }
        for (d, why) in &self.pending {
            t.add_row([
                d.item.kind.to_string(),
                d.item.name.clone(),
                format!("{}:{}", d.origin, d.item.line),
                format!("waiting for: {why}"),
            ]);
        }
        out.push_str(&offload::table::text(&t));
    }
}

/// Load `defs` as one module; errors point into the definition (and its
/// file and line) they are in.
pub(super) fn load_defs(rt: &Runtime, defs: &[Def]) -> Result<Module> {
    load_defs_diag(rt, defs).map_err(|f| ReplError::Entry(f.text))
}

/// Why a session's definitions did not load: the rendered errors, and for
/// each error the definition it is in and its message, followed by the
/// place it is about (`… at FILE:LINE:COLUMN`).
pub(super) struct LoadFailure {
    text: String,
    errors: Vec<(usize, String)>,
}

impl LoadFailure {
    /// The errors that name a class, function or type no definition has:
    /// (definition, the message).
    pub(super) fn unresolved(&self) -> Vec<(usize, String)> {
        self.errors
            .iter()
            .filter(|(_, m)| is_unresolved(m))
            .cloned()
            .collect()
    }

    pub(super) fn all_unresolved(&self) -> bool {
        self.errors.iter().all(|(_, m)| is_unresolved(m))
    }
}

/// Whether a load error names something not defined (yet).
pub(super) fn is_unresolved(message: &str) -> bool {
    [
        "unknown class",
        "unknown function",
        "unknown superclass",
        "unknown type",
    ]
    .iter()
    .any(|p| message.starts_with(p))
}

pub(super) fn load_defs_diag(
    rt: &Runtime,
    defs: &[Def],
) -> std::result::Result<Module, LoadFailure> {
    let mut src = String::new();
    let mut starts = Vec::new();
    for d in defs {
        starts.push(src.len());
        src.push_str(&d.item.text);
        if !d.item.text.ends_with('\n') {
            src.push('\n');
        }
    }
    match rt.load("<session>", &src) {
        Ok(m) => Ok(m),
        Err(OffloadError::Load { diagnostics, .. }) => {
            let mut text = String::new();
            let mut errors = Vec::new();
            for d in &diagnostics.0 {
                let at = d.span.start as usize;
                let i = starts.partition_point(|&s| s <= at).saturating_sub(1);
                let def = &defs[i];
                let pad = "\n".repeat(def.item.line as usize - 1);
                let shift = pad.len() as i64 - starts[i] as i64;
                let mut moved = d.clone();
                moved.file = def.origin.as_str().into();
                moved.span.start = (i64::from(d.span.start) + shift) as u32;
                moved.span.end = (i64::from(d.span.end) + shift) as u32;
                let local = format!("{pad}{}", def.item.text);
                // The message with the place it is about, FILE:LINE:COLUMN.
                let before = local.get(..moved.span.start as usize).unwrap_or("");
                let line = before.matches('\n').count() + 1;
                let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                errors.push((i, format!("{} at {}:{line}:{col}", d.message, def.origin)));
                text.push_str(&offload::diagnostics::render(&moved, &local));
            }
            Err(LoadFailure {
                text: strip_error(&text),
                errors,
            })
        }
        Err(e) => Err(LoadFailure {
            text: e.to_string(),
            errors: Vec::new(),
        }),
    }
}

/// Whether two kinds of definition share a namespace (classes apart from
/// functions and kernels).
pub(super) fn same_namespace(a: &str, b: &str) -> bool {
    (a == "class") == (b == "class")
}

/// Rendered diagnostics start with `error: `, which the REPL adds itself.
pub(super) fn strip_error(text: &str) -> String {
    let t = text.trim_end();
    t.strip_prefix("error: ").unwrap_or(t).to_string()
}
