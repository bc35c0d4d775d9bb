//! What the REPL shows of a launch and of code: the summary, the deopt
//! table, per-site counters, the profile, a kernel's versions, and long code
//! views with a range or a filter.

use super::*;

impl Session {
    pub(super) fn profile(&self, out: &mut String) -> Result<()> {
        let last = self
            .last
            .as_ref()
            .ok_or_else(|| ReplError::Entry("no launch yet: `run` a kernel first".into()))?;
        let Some(p) = &last.report.profile else {
            bail!(
                "the last launch collected no profile: `:set profile on` (launches then run in the interpreter) or `:set speculate N` (warm-up launches profile)"
            );
        };
        let v = self.module()?.program().verified().clone();
        for (fi, fp) in p.funcs.iter().enumerate() {
            let entries = fp.execs.first().copied().unwrap_or(0);
            if entries == 0 {
                continue;
            }
            let f = &v.funcs[fi];
            let _ = writeln!(out, "{}: entered {entries} times", f.name);
            for bci in 0..fp.execs.len() {
                let mut parts = Vec::new();
                let [t, n] = fp.branches[bci];
                if t + n > 0 {
                    parts.push(format!("branch taken {t}, not taken {n}"));
                }
                if !fp.receivers[bci].is_empty() {
                    let rs: Vec<String> = fp.receivers[bci]
                        .iter()
                        .map(|&(c, k)| {
                            let name = v
                                .classes
                                .get(c as usize)
                                .map_or(format!("class {c}"), |c| c.name.clone());
                            format!("{name} {k}")
                        })
                        .collect();
                    parts.push(format!("receivers {}", rs.join(", ")));
                }
                if fp.nulls[bci] > 0 {
                    parts.push(format!("null {}", fp.nulls[bci]));
                }
                if !parts.is_empty() {
                    let _ = writeln!(
                        out,
                        "  @{bci:<4} ran {:<8} {}",
                        fp.execs[bci],
                        parts.join("; ")
                    );
                }
            }
        }
        Ok(())
    }

    /// `:info KERNEL`: versions, speculations, counters and decisions.
    pub(super) fn info(&self, words: &[&str], out: &mut String) -> Result<()> {
        let k = one(words, ":info KERNEL")?;
        let Some(info) = self.module()?.kernel_info(k)? else {
            let _ = writeln!(out, "{k} has not been launched since it was defined");
            return Ok(());
        };
        let _ = writeln!(
            out,
            "{k}: {} launches, version {} ({} recompiles), next runs on {}",
            info.launches,
            info.version,
            info.recompiles,
            info.device.name()
        );
        for s in &info.speculations {
            let _ = writeln!(out, "  speculates {s}");
        }
        for ((ver, site, reason), n) in &info.deopts {
            let _ = writeln!(
                out,
                "  v{ver} site {} {}: {n} deopts",
                site.0,
                reason.name()
            );
        }
        // Launches in a row that ran the same way and were decided alike
        // (a kept kernel's every launch) are one line.
        let key = |l: &offload::policy::Logged| {
            (
                l.version,
                l.device,
                l.policy,
                offload::policy::decision_name(&l.decided.decision),
                l.decided.why.clone(),
                l.applied.clone(),
            )
        };
        let mut i = 0;
        while i < info.log.len() {
            let first = &info.log[i];
            let mut j = i + 1;
            while j < info.log.len()
                && info.log[j].launch == info.log[j - 1].launch + 1
                && key(&info.log[j]) == key(first)
            {
                j += 1;
            }
            if j - i == 1 {
                let _ = writeln!(out, "  {first}");
            } else {
                let text = first.to_string();
                let rest = text
                    .strip_prefix(&format!("launch {} ", first.launch))
                    .unwrap_or(&text);
                let _ = writeln!(
                    out,
                    "  launches {}-{} {rest}",
                    first.launch,
                    info.log[j - 1].launch
                );
            }
            i = j;
        }
        Ok(())
    }
}

/// A code view's name and what to show of it.
pub(super) fn code_args<'a>(words: &[&'a str], usage: &str) -> Result<(&'a str, Option<&'a str>)> {
    match words {
        [name] => Ok((name, None)),
        [name, view] => Ok((name, Some(view))),
        _ => bail!("usage: {usage}"),
    }
}

/// Lines a code view shows when given no range or filter.
pub(super) const CODE_VIEW_LINES: usize = 60;

/// Shows `text`: whole when short, else its first [`CODE_VIEW_LINES`] lines
/// and how to see the rest; `A..B` shows lines A to B (1-based, B
/// included; either may be left out), any other word the lines that
/// contain it, numbered.
pub(super) fn code_view(
    text: &str,
    cmd: &str,
    name: &str,
    view: Option<&str>,
    out: &mut String,
) -> Result<()> {
    let lines: Vec<&str> = text.lines().collect();
    let n = lines.len();
    let numbered = |out: &mut String, i: usize| {
        let _ = writeln!(out, "{:>5}  {}", i + 1, lines[i]);
    };
    match view {
        None if n <= CODE_VIEW_LINES => out.push_str(text),
        None => {
            for l in &lines[..CODE_VIEW_LINES] {
                let _ = writeln!(out, "{l}");
            }
            let _ = writeln!(
                out,
                "... {} more lines (of {n}): `{cmd} {name} {}..` shows them, `{cmd} {name} TEXT` the lines with TEXT",
                n - CODE_VIEW_LINES,
                CODE_VIEW_LINES + 1
            );
        }
        Some(v)
            if v.contains("..")
                && v.split("..")
                    .all(|p| p.is_empty() || p.parse::<usize>().is_ok()) =>
        {
            let (a, b) = v.split_once("..").expect("checked");
            let lo = a.parse::<usize>().unwrap_or(1).max(1);
            let hi = b.parse::<usize>().unwrap_or(n).min(n);
            if lo > hi {
                bail!("{cmd} {name}: lines {v} are not in 1..{n}");
            }
            for i in lo - 1..hi {
                numbered(out, i);
            }
        }
        Some(pat) => {
            let hits: Vec<usize> = (0..n).filter(|&i| lines[i].contains(pat)).collect();
            if hits.is_empty() {
                let _ = writeln!(out, "no line of {cmd} {name} contains `{pat}` ({n} lines)");
            }
            for i in hits {
                numbered(out, i);
            }
        }
    }
    Ok(())
}

pub(super) fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// The summary of a launch.
pub(super) fn summary(last: &Last, out: &mut String) {
    let r = &last.report;
    let n = r.range.end - r.range.start;
    let _ = writeln!(
        out,
        "{} over {} on {}{} ({} workers): {} of {} completed in {}",
        r.kernel,
        r.range_text(),
        r.device.name(),
        r.version.map(|v| format!(" v{v}")).unwrap_or_default(),
        r.workers,
        r.completed,
        n,
        r.timings
    );
    // The range's partition (see `LaunchReport::on_device`).
    let mut parts = vec![
        if r.split.is_empty() {
            format!("{} ran on the {} device", r.on_device, r.device.name())
        } else {
            format!("{} ran on the devices of the split", r.on_device)
        },
        format!("{} replayed after a deopt", r.replayed),
    ];
    if r.interrupted {
        parts.push(format!("{} stopped part-way", r.abandoned));
        parts.push(format!("{} not started", r.not_started()));
    }
    let _ = writeln!(out, "  {} · {} threw", parts.join(", "), r.threw);
    let deopts: u64 = r.deopts.values().sum();
    if deopts > 0 || r.never_ran > 0 {
        let mut by_reason: BTreeMap<&str, u64> = BTreeMap::new();
        for ((_, reason), k) in &r.deopts {
            *by_reason.entry(reason.name()).or_default() += k;
        }
        let reasons: Vec<String> = by_reason.iter().map(|(r, k)| format!("{r} {k}")).collect();
        let mut line = format!("  deopts {deopts}");
        if !reasons.is_empty() {
            let _ = write!(line, " ({})", reasons.join(", "));
        }
        if r.resumed > 0 {
            let _ = write!(line, " · {} resumed on the device", r.resumed);
        }
        if r.never_ran > 0 {
            let _ = write!(
                line,
                " · never-ran {} (left unstarted by a stop, then run)",
                r.never_ran
            );
        }
        let _ = writeln!(out, "{line}");
    }
    if let Some(g) = &r.gpu {
        // Several GPUs name themselves (`GPU k: …`).
        let g = if g.starts_with("GPU ") {
            g.clone()
        } else {
            format!("GPU {g}")
        };
        let mut line = format!(
            "  {g} · {} to the device, {} back",
            offload::diagnostics::bytes_text(r.to_device_bytes),
            offload::diagnostics::bytes_text(r.to_host_bytes)
        );
        if r.waits > 0 {
            let _ = write!(line, " · {} safepoints passed waiting in place", r.waits);
        }
        if r.runs_beside > 0 {
            let _ = write!(
                line,
                " · {} of {} runs beside other launches",
                r.runs_beside, r.launches
            );
        }
        if let Some(d) = r.dispatch.filter(|d| d.lookups > 0) {
            let _ = write!(
                line,
                " · {} class lookups, {} by address, {} loading the header",
                d.lookups,
                d.by_address(),
                d.header_loads
            );
        }
        let _ = writeln!(out, "{line}");
    }
    // A launch split over devices: a line per device.
    for s in &r.split {
        let _ = writeln!(
            out,
            "  split: {} ran {} of {} ({:.0}%) in {} part{} · busy {} · idle at the end {} · {}",
            s.device,
            s.workitems,
            n,
            if n > 0 {
                100.0 * s.workitems as f64 / n as f64
            } else {
                0.0
            },
            s.parts,
            if s.parts == 1 { "" } else { "s" },
            offload::diagnostics::duration_text(s.busy),
            offload::diagnostics::duration_text(s.idle_tail),
            if s.speed >= 0.01 {
                format!("speed {:.3} of the fastest", s.speed)
            } else if s.speed > 0.0 {
                format!("speed {:.1e} of the fastest", s.speed)
            } else {
                "speed not measured yet".to_string()
            }
        );
    }
    if let Some(f) = &r.fallback {
        let _ = writeln!(out, "  note: {f}");
    }
    // The policy's decision, unless it kept things as they were.
    if let Some(d) = &r.decision
        && offload::adaptive::decision_name(&d.decided.decision) != "keep"
    {
        let _ = writeln!(out, "  policy: {d}");
    }
    if let Some(e) = &last.exceptions {
        for l in e.lines() {
            let _ = writeln!(out, "  {l}");
        }
    }
}

pub(super) fn deopt_table(last: &Last, out: &mut String) {
    let r = &last.report;
    let total: u64 = r.deopts.values().sum::<u64>().max(r.abandoned);
    if r.deopt_table.is_empty() {
        let _ = writeln!(
            out,
            "no workitem deoptimized in the last launch of {}",
            r.kernel
        );
        return;
    }
    let _ = writeln!(
        out,
        "{} deopt(s) in the last launch of {}{}:",
        total,
        r.kernel,
        if total as usize > r.deopt_table.len() {
            format!(" (the first {} by workitem)", r.deopt_table.len())
        } else {
            String::new()
        }
    );
    out.push_str(&r.deopt_table_text());
}

pub(super) fn sites(last: &Last, out: &mut String) {
    let r = &last.report;
    if r.deopts.is_empty() {
        let _ = writeln!(out, "no deopts in the last launch of {}", r.kernel);
        return;
    }
    let mut t = offload::table::new(["bci", "reason", "deopts"]);
    for ((bci, reason), n) in &r.deopts {
        t.add_row([bci.to_string(), reason.name().to_string(), n.to_string()]);
    }
    offload::table::right(&mut t, &[0, 2]);
    out.push_str(&offload::table::text(&t));
    if !r.site_deopts.is_empty() {
        let _ = writeln!(
            out,
            "by site of version {}:",
            r.version.map_or("-".to_string(), |v| v.to_string())
        );
        let mut t = offload::table::new(["site", "reason", "deopts"]);
        for ((site, reason), n) in &r.site_deopts {
            t.add_row([site.0.to_string(), reason.name().to_string(), n.to_string()]);
        }
        offload::table::right(&mut t, &[0, 2]);
        out.push_str(&offload::table::text(&t));
    }
}

impl Session {
    /// `:heap`: sizes, the verifier's walk, the GPU's copy, handles and
    /// collections, and the pages by tag (`offload_heap::pages`): what
    /// each class's pages hold and leave unused.
    pub(super) fn heap_view(&self, out: &mut String) -> Result<()> {
        let mods: Vec<&Module> = self.module.iter().collect();
        // Before verifying, which brings back what the GPU wrote.
        let res = self.rt.heap().residency();
        let w = self.rt.verify_heap(&mods)?;
        let heap = self.rt.heap();
        let b = offload::diagnostics::bytes_text;
        let _ = writeln!(
            out,
            "heap: {} in use, {} committed, {} at most",
            b(heap.used()),
            b(heap.committed() as u64),
            b(heap.config().max as u64)
        );
        let _ = writeln!(
            out,
            "  verified: {}, {}, {} ({})",
            offload::diagnostics::count_text(w.objects, "object"),
            offload::diagnostics::count_text(w.arrays, "array"),
            offload::diagnostics::count_text(w.fillers, "filler"),
            b(w.filler_bytes)
        );
        if heap.is_mirrored() {
            let (place, there, here) = match self.rt.gpu_ordinals().len() {
                0 | 1 => ("the GPU".to_string(), "there", "here"),
                n => (
                    format!("{n} GPUs"),
                    "on a GPU than here",
                    "here than on a GPU (counted once per GPU)",
                ),
            };
            let _ = writeln!(
                out,
                "  on {place}: {} chunks of {} newer {there}, {} newer {here}; {} fetched by host reads so far",
                res.host_stale_chunks,
                b(offload_heap::resident::CHUNK_BYTES as u64),
                res.device_stale_chunks,
                b(res.fetched_bytes)
            );
        }
        let gc = self.rt.gc_totals();
        let _ = writeln!(
            out,
            "  handles: {}; collections: {gc}",
            self.rt.live_handles()
        );
        let pages = heap.page_stats().map_err(offload::OffloadError::from)?;
        if pages.kinds.is_empty() {
            return Ok(());
        }
        let name = |tag: u32| match tag {
            offload_heap::pages::MIXED => "mixed (launches' objects)".to_string(),
            offload_heap::pages::ARRAYS => "arrays".to_string(),
            c => mods
                .iter()
                .find_map(|m| {
                    let p = m.program();
                    p.local_class(c).map(|l| p.verified().class(l).name.clone())
                })
                .unwrap_or_else(|| format!("class {c}")),
        };
        let _ = writeln!(
            out,
            "  pages by what starts on them ({} each; unused: fillers, the rest of open runs and padding):",
            b(offload_heap::pages::PAGE_BYTES as u64)
        );
        let mut t = offload::table::new(["  holds", "pages", "objects", "in objects", "unused"]);
        for k in &pages.kinds {
            t.add_row([
                format!("  {}", name(k.tag)),
                k.pages.to_string(),
                k.objects.to_string(),
                b(k.object_bytes),
                b(k.filler_bytes),
            ]);
        }
        offload::table::right(&mut t, &[1, 2, 3, 4]);
        out.push_str(&offload::table::text(&t));
        Ok(())
    }
}
