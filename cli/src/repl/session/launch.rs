//! Launches at the prompt: `run`, `reduce` (through `run`), `:time` and
//! `:safepoint`.

use super::*;

impl Session {
    /// `run KERNEL RANGE ARGS...` (or `reduce COMBINE ...`, as `how`
    /// says): the reduction's value, if it is one that completed. With
    /// `quiet`, no summary: the report goes there.
    pub(super) fn run(
        &mut self,
        words: &[&str],
        how: reduce::Launch,
        quiet: Option<&mut Vec<LaunchReport>>,
        out: &mut String,
    ) -> Result<Option<Arg>> {
        let usage = match how {
            reduce::Launch::ForEach => "usage: run KERNEL START..END ARGS... (`:help run`)",
            reduce::Launch::Reduce(_) => reduce::USAGE,
        };
        let [kernel, rest @ ..] = words else {
            bail!("{usage}");
        };
        // A 2-D or 3-D range is a tuple, `(0..h, 0..w)`, spaces allowed.
        let (range, args) =
            parse::split_range(rest).ok_or_else(|| ReplError::Entry(usage.into()))?;
        let range = range.as_str();
        if let Some((_, why)) = self
            .pending
            .iter()
            .find(|(d, _)| d.item.kind == "kernel" && d.item.name == *kernel)
        {
            bail!("kernel `{kernel}` is not loaded yet: it waits for what it names ({why})");
        }
        let m = self.module()?.clone();
        let range = parse::parse_launch_range(range, &self.vars)?;
        // `sum(bins)`: an array the launch sums into.
        let summed: Vec<usize> = (0..args.len())
            .filter(|&i| args[i].starts_with("sum(") && args[i].ends_with(')'))
            .collect();
        let args: Vec<&str> = args
            .iter()
            .map(|a| {
                a.strip_prefix("sum(")
                    .and_then(|a| a.strip_suffix(')'))
                    .unwrap_or(a)
            })
            .collect();
        let captures = self.captures(&m, kernel, &args)?;
        let mut closure = m.closure(kernel, captures)?;
        let v = m.program().verified();
        for i in summed {
            let Some(k) = v.func_named(kernel) else { break };
            let name = v.func(k).params()[i + 1].name.clone();
            closure = closure.summed(&name).map_err(|e| {
                let at = offload::ir::summed::check(v, k, i as u32 + 1)
                    .err()
                    .and_then(|n| n.at);
                self.summed_error(e, kernel, at)
            })?;
        }
        // A safepoint armed with `:safepoint`: requested from another
        // thread after its delay, unless the launch ends first.
        let armed = self.safepoint_after.take();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let rt = self.rt.clone();
        let timer = armed.map(|delay| {
            std::thread::spawn(move || match stop_rx.recv_timeout(delay) {
                Err(mpsc::RecvTimeoutError::Timeout) => Some(rt.safepoint(|heap| heap.used())),
                _ => None,
            })
        });
        let t0 = Instant::now();
        let (r, value) = reduce::launch(&self.rt, how, range, &closure);
        let wall = t0.elapsed();
        let _ = stop_tx.send(());
        let sp = timer.and_then(|t| t.join().ok().flatten());
        let (report, exceptions, interrupted) = match r {
            Ok(rep) => (rep, None, false),
            Err(OffloadError::Exceptions(e)) => {
                let text = self.source_lines(&e.to_string());
                (e.report, Some(text), false)
            }
            Err(OffloadError::Interrupted(rep)) => (*rep, None, true),
            Err(e) => return Err(e.into()),
        };
        let expected = std::mem::take(&mut self.expect_throws);
        let threw = report.threw;
        let last = Last { report, exceptions };
        if let Some(reps) = quiet {
            reps.push(last.report.clone());
            self.last = Some(last);
            if interrupted {
                bail!("interrupted: the timing stopped");
            }
            return Ok(value);
        }
        summary(&last, out);
        if let (reduce::Launch::Reduce(c), Some(v)) = (how, &value) {
            reduce::value_line(c, v, out);
        }
        if let Some(delay) = armed {
            match sp {
                Some((used, tts)) => {
                    let _ = writeln!(
                        out,
                        "safepoint requested after {}: every worker stopped within {} ({} heap bytes in use), then the launch went on",
                        ms(delay),
                        ms(tts),
                        used
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "safepoint requested after {}: the launch had already finished ({})",
                        ms(delay),
                        ms(wall)
                    );
                }
            }
        }
        self.last = Some(last);
        if expected && threw == 0 && !interrupted {
            bail!("`:expect throws`: no workitem of this run threw");
        }
        if self.script && !expected && threw > 0 {
            bail!(
                "{threw} workitem(s) threw; a script stops at exceptions it did not expect (`:expect throws` before a run allows them)"
            );
        }
        if interrupted {
            let rep = &self.last.as_ref().expect("just set").report;
            bail!(
                "{}: {} of {} workitems completed, {} stopped part-way, {} not started (the heap is consistent; `:deopts` lists the stopped ones)",
                match rep.deadline {
                    Some(d) => format!(
                        "stopped at the deadline ({})",
                        offload::diagnostics::duration_text(d)
                    ),
                    None => "interrupted".to_string(),
                },
                rep.completed,
                rep.range.end - rep.range.start,
                rep.abandoned,
                rep.not_started()
            );
        }
        Ok(value)
    }

    /// The captures of a launch of `kernel` of `m` from the words `args`:
    /// variables, `null`, or literals (which take the type of the
    /// parameter they are passed to).
    fn captures(&self, m: &Module, kernel: &str, args: &[&str]) -> Result<Vec<Arg>> {
        let v = m.program().verified();
        let params: Vec<(String, Type)> = v
            .func_named(kernel)
            .map(|k| {
                v.func(k).params()[1..]
                    .iter()
                    .map(|l| (l.name.clone(), l.ty))
                    .collect()
            })
            .unwrap_or_default();
        let mut captures = Vec::new();
        for (i, a) in args.iter().enumerate() {
            let param = params.get(i);
            let numeric = |t: Type| matches!(t, Type::I32 | Type::I64 | Type::F32 | Type::F64);
            captures.push(match self.vars.get(*a) {
                Some(var) => var.arg(),
                // A reference parameter takes a variable or `null`.
                None if *a != "null" && param.is_some_and(|p| !numeric(p.1)) => {
                    let (name, ty) = param.expect("checked");
                    bail!(
                        "argument {} of `{kernel}`: `{a}` is no variable, and parameter `{name}` is {} {} (pass a variable holding one, or null){}",
                        i + 1,
                        article(&v.type_name(*ty)),
                        v.type_name(*ty),
                        self.did_you_mean_var(a)
                    );
                }
                None => self
                    .literal(a, param.map(|p| p.1))
                    .map_err(|e| {
                        ReplError::Entry(format!(
                            "argument {} of `{kernel}`{}: {} (and no variable has that name){}",
                            i + 1,
                            param.map_or(String::new(), |(n, _)| format!(" (`{n}`)")),
                            e,
                            self.did_you_mean_var(a)
                        ))
                    })?,
            });
        }
        Ok(captures)
    }

    /// `:time [N] run ...` and `:time [N] reduce COMBINE ...`.
    pub(super) fn time(&mut self, words: &[&str], out: &mut String) -> Result<()> {
        let (n, rest) = match words.first().map(|w| w.parse::<usize>()) {
            Some(Ok(n)) => (n, &words[1..]),
            _ => (5, words),
        };
        let usage = "usage: :time [N] run KERNEL RANGE ARGS... | :time [N] reduce sum|min|max KERNEL RANGE ARGS...";
        let (how, launch) = match rest.first() {
            _ if n == 0 => bail!("{usage}"),
            Some(&"run") => (reduce::Launch::ForEach, &rest[1..]),
            Some(&"reduce") => (
                reduce::Launch::Reduce(reduce::combine(rest.get(1))?),
                rest.get(2..).unwrap_or(&[]),
            ),
            _ => bail!("{usage}"),
        };
        let mut reps = Vec::new();
        for _ in 0..n {
            let mut sink = String::new();
            self.run(launch, how, Some(&mut reps), &mut sink)?;
        }
        let mut totals: Vec<Duration> = reps.iter().map(|r| r.timings.total).collect();
        totals.sort();
        let first = reps.first().expect("n >= 1");
        let _ = writeln!(
            out,
            "{} over {} on {}, {n} launches: min {}, median {}, max {} (the first compiled for {})",
            first.kernel,
            first.range_text(),
            first.device.name(),
            ms(totals[0]),
            ms(totals[n / 2]),
            ms(totals[n - 1]),
            ms(first.timings.compile)
        );
        Ok(())
    }

    pub(super) fn arm_safepoint(&mut self, words: &[&str], out: &mut String) -> Result<()> {
        let d = one(words, ":safepoint DELAY (like 20ms, 1s; `off` to disarm)")?;
        if d == "off" {
            self.safepoint_after = None;
            out.push_str("safepoint disarmed\n");
            return Ok(());
        }
        let delay = parse_duration(d)?;
        self.safepoint_after = Some(delay);
        let _ = writeln!(
            out,
            "the next launch gets a safepoint request {} after it starts",
            ms(delay)
        );
        Ok(())
    }
}

impl Session {
    /// A refused `sum(NAME)` with the line it names in the definition's
    /// own file and line (the runtime names a line of the session's
    /// combined source).
    fn summed_error(&self, e: OffloadError, kernel: &str, at: Option<u32>) -> ReplError {
        let text = e.to_string();
        let mapped = at.and_then(|b| {
            let (origin, lines) = self.source_lines.get(kernel)?;
            let line = lines.get(b as usize)?;
            let cut = text.find(" at line ")?;
            let rest = &text[cut + " at line ".len()..];
            let end = rest.find(',').unwrap_or(rest.len());
            Some(format!(
                "{} at {origin}:{line}{}",
                &text[..cut],
                &rest[end..]
            ))
        });
        ReplError::Entry(mapped.unwrap_or(text))
    }
}
