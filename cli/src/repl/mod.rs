//! `offload repl` and `offload run FILE`: define classes and kernels, make
//! host arrays and objects, offload a range and look at what happened on the
//! device — on the public `offload` API only (this module is part of the
//! binary, not the library, so it cannot reach anything else).
//!
//! - On a terminal, `offload repl` edits lines with rustyline: persistent
//!   history, completion of commands, kernels, classes and variables, and
//!   multi-line definitions (an entry that opens braces goes on until they
//!   close, so pasted `.obc` text works).
//! - With another standard input (a pipe, a file), `offload repl` reads the
//!   entries from it, echoes each after the prompt and goes on after errors:
//!   what the golden transcripts test.
//! - `offload run FILE` runs a script of the same entries and stops at the
//!   first error, naming the file and line.
//!
//! Ctrl-C while a launch runs interrupts it (`Runtime::interrupt`): the
//! launch stops at its next poll and is reported with what completed, and
//! the REPL goes on. Ctrl-C while editing clears the line; Ctrl-D or
//! `:quit` leaves.

mod batch;
mod help;
mod input;
mod session;
mod suggest;

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Context, Editor, Helper, Highlighter, Hinter};
use session::Session;
pub use session::{Settings, parse_duration};
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const PROMPT: &str = "offload> ";

/// Route Ctrl-C to the session's runtime: it interrupts the launch that
/// is running, if any (the line editor reads Ctrl-C itself while editing).
fn install_ctrl_c(s: &Session) -> Result<(), String> {
    let current = s.current.clone();
    ctrlc::set_handler(move || {
        let rt = current.lock().unwrap_or_else(|e| e.into_inner()).clone();
        rt.interrupt();
    })
    .map_err(|e| format!("error: cannot handle Ctrl-C: {e}"))
}

fn is_quit(entry: &str) -> bool {
    matches!(entry.trim(), ":quit" | ":q" | ":exit")
}

/// `offload repl`.
pub fn repl(settings: Settings, history: Option<PathBuf>) -> Result<(), String> {
    let mut s = Session::new(settings).map_err(|e| format!("error: {e}"))?;
    if std::io::stdin().is_terminal() {
        interactive(&mut s, history)
    } else {
        install_ctrl_c(&s)?;
        piped(&mut s)
    }
}

/// Entries from a pipe: echoed, errors shown, never fatal.
fn piped(s: &mut Session) -> Result<(), String> {
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    let mut entry = input::Entry::default();
    let mut batch = batch::Batch::default();
    let mut start = 1u32;
    for (i, line) in stdin.lock().split(b'\n').enumerate() {
        let line = line.map_err(|e| format!("error: reading standard input: {e}"))?;
        // A line that is not UTF-8 is reported where it is and skipped: the
        // session goes on.
        let mut line = match offload::diagnostics::utf8_at(line) {
            Ok(l) => l,
            Err((_, col, byte)) => {
                let _ = writeln!(
                    stdout,
                    "error: <stdin>:{}:{col}: not UTF-8 text (byte 0x{byte:02x}); the line was skipped",
                    i + 1
                );
                continue;
            }
        };
        if line.ends_with('\r') {
            line.pop();
        }
        if entry.is_empty() {
            start = i as u32 + 1;
        }
        if !entry.push(&line) {
            continue;
        }
        let e = entry.take();
        if batch.takes(&e) {
            batch.push(e, start);
            continue;
        }
        show(&mut stdout, batch.flush(s, "<stdin>"));
        echo_entry(&mut stdout, &e);
        if is_quit(&e) {
            return Ok(());
        }
        let mut out = String::new();
        let r = s.execute_at(&e, "<stdin>", start, &mut out);
        let _ = write!(stdout, "{out}");
        if let Err(e) = r {
            let _ = writeln!(stdout, "error: {e}");
        }
        let _ = stdout.flush();
    }
    show(&mut stdout, batch.flush(s, "<stdin>"));
    if !entry.is_blank() {
        let _ = writeln!(
            stdout,
            "error: {}",
            unclosed(entry.unclosed(), "<stdin>", start, "input")
        );
    }
    if let Some(e) = never_defined(s, "<stdin>", "input") {
        let _ = writeln!(stdout, "{e}");
    }
    Ok(())
}

/// Shows a batch's entries on a pipe: each echoed, then what it printed or
/// its error.
fn show(stdout: &mut impl Write, done: Vec<batch::Done>) {
    for d in done {
        echo_entry(stdout, &d.entry);
        let _ = write!(stdout, "{}", d.out);
        if let Some(msg) = d.err {
            let _ = writeln!(stdout, "error: {msg}");
        }
    }
    let _ = stdout.flush();
}

/// Show an entry as if typed after the prompt; comments between entries
/// are the script's narration, shown as they are.
fn echo_entry(out: &mut impl Write, e: &str) {
    if e.trim().is_empty() {
        return;
    }
    if e.lines().all(|l| l.trim_start().starts_with(';')) {
        let _ = writeln!(out, "{e}");
    } else {
        let _ = writeln!(out, "{PROMPT}{}", e.replace('\n', "\n... "));
    }
}

/// `offload run FILE [--echo]`: stop at the first error, naming its line.
pub fn script(settings: Settings, path: &Path, echo: bool) -> Result<(), String> {
    let name = path.display().to_string();
    let text = offload::diagnostics::read_source(path).map_err(|e| format!("error: {e}"))?;
    let mut s = Session::new(settings).map_err(|e| format!("error: {e}"))?;
    s.script = true;
    install_ctrl_c(&s)?;
    let mut stdout = std::io::stdout();
    let mut entry = input::Entry::default();
    let mut batch = batch::Batch::default();
    let mut start = 0u32;
    // Shows what entries printed, up to the first error (which ends the
    // script, named with its line).
    let report = |stdout: &mut std::io::Stdout, done: Vec<batch::Done>| -> Result<(), String> {
        for d in done {
            if echo {
                echo_entry(stdout, &d.entry);
            }
            let _ = write!(stdout, "{}", d.out);
            let _ = stdout.flush();
            if let Some(msg) = d.err {
                // Definition errors already name the file, line and column.
                return Err(if msg.contains(&format!("{name}:")) {
                    format!("error: {msg}")
                } else {
                    format!("error: {name}:{}: {msg}", d.start)
                });
            }
        }
        Ok(())
    };
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if entry.is_empty() {
            start = i as u32 + 1;
        }
        let complete = entry.push(line);
        if !complete && i + 1 < lines.len() {
            continue;
        }
        let open = entry.unclosed();
        let e = entry.take();
        if complete && batch.takes(&e) {
            batch.push(e, start);
            continue;
        }
        report(&mut stdout, batch.flush(&mut s, &name))?;
        if !complete {
            return Err(format!("error: {}", unclosed(open, &name, start, "file")));
        }
        if is_quit(&e) {
            if echo {
                echo_entry(&mut stdout, &e);
            }
            return Ok(());
        }
        let mut out = String::new();
        let r = s.execute_at(&e, &name, start, &mut out);
        report(
            &mut stdout,
            vec![batch::Done {
                entry: e,
                start,
                out,
                err: r.err().map(|e| e.to_string()),
            }],
        )?;
    }
    report(&mut stdout, batch.flush(&mut s, &name))?;
    match never_defined(&s, &name, "script") {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The error for input that ends inside a definition starting at line
/// `start` of `name`: it names the brace never closed (`open`, from
/// [`input::Entry::unclosed`]).
fn unclosed(open: Option<(u32, u32)>, name: &str, start: u32, what: &str) -> String {
    match open {
        Some((line, col)) => format!(
            "{name}:{}:{col}: the {what} ended inside a definition: this `{{` is never closed",
            start + line - 1
        ),
        None => format!("{name}:{start}: the {what} ended inside a definition"),
    }
}

/// The error for definitions still waiting, at the end of a script or of
/// piped input: each with what it names and where.
fn never_defined(s: &Session, name: &str, what: &str) -> Option<String> {
    let waiting = s.waiting();
    (!waiting.is_empty()).then(|| {
        format!(
            "error: {name}: the {what} ended with definitions that name what was never defined:\n  {}",
            waiting.join("\n  ")
        )
    })
}

/// Names completion offers, refreshed after every entry.
#[derive(Default)]
struct Names {
    kernels: Vec<String>,
    classes: Vec<String>,
    funcs_and_vars: Vec<String>,
}

#[derive(Helper, Hinter, Highlighter)]
struct LineHelper {
    names: Arc<Mutex<Names>>,
}

impl Completer for LineHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let head = &line[..pos];
        let start = head
            .rfind(|c: char| c.is_whitespace() || "[(=.".contains(c))
            .map_or(0, |i| i + 1);
        let word = &head[start..];
        let first_word = head[..start].trim().is_empty();
        let prev = head[..start].split_whitespace().last().unwrap_or("");
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        let mut pool: Vec<String> = Vec::new();
        if first_word {
            pool.extend(help::names().map(String::from));
        } else {
            match prev {
                "run" | "sum" | "min" | "max" | ":clif" | ":ptx" | ":meta" | ":info" => {
                    pool.extend(names.kernels.iter().cloned());
                }
                "new" => pool.extend(names.classes.iter().cloned()),
                ":bytecode" | ":bc" => {
                    pool.extend(names.kernels.iter().cloned());
                    pool.extend(names.funcs_and_vars.iter().cloned());
                }
                ":help" | ":h" => pool.extend(help::names().map(String::from)),
                ":set" => pool.extend(
                    [
                        "device",
                        "workers",
                        "policy",
                        "speculate",
                        "tlab",
                        "inject",
                        "fail-refills",
                        "profile",
                        "max-heap",
                        "deopt-records",
                    ]
                    .map(String::from),
                ),
                "device" => pool.extend(["cpu", "cuda", "interp"].map(String::from)),
                "policy" => pool.extend(offload::policy::NAMES.map(String::from)),
                _ => {
                    pool.extend(names.funcs_and_vars.iter().cloned());
                    pool.extend(names.classes.iter().cloned());
                    pool.extend(names.kernels.iter().cloned());
                }
            }
        }
        pool.sort();
        pool.dedup();
        let found = pool
            .into_iter()
            .filter(|c| c.starts_with(word))
            .map(|c| Pair {
                display: c.clone(),
                replacement: c,
            })
            .collect();
        Ok((start, found))
    }
}

impl Validator for LineHelper {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        Ok(if input::complete(ctx.input()) {
            ValidationResult::Valid(None)
        } else {
            ValidationResult::Incomplete
        })
    }
}

fn history_path(given: Option<PathBuf>) -> Option<PathBuf> {
    given
        .or_else(|| std::env::var_os("OFFLOAD_HISTORY").map(PathBuf::from))
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".offload_history")))
}

fn interactive(s: &mut Session, history: Option<PathBuf>) -> Result<(), String> {
    let config = rustyline::Config::builder()
        .auto_add_history(false)
        .max_history_size(10_000)
        .map_err(|e| format!("error: {e}"))?
        .build();
    let mut rl: Editor<LineHelper, rustyline::history::DefaultHistory> =
        Editor::with_config(config)
            .map_err(|e| format!("error: cannot start the line editor: {e}"))?;
    let names = Arc::new(Mutex::new(Names::default()));
    rl.set_helper(Some(LineHelper {
        names: names.clone(),
    }));
    // After the editor: it takes SIGINT for itself while it lives (and
    // reads Ctrl-C as a key while editing, in raw mode); the handler set
    // here replaces its handler, so a Ctrl-C during a launch interrupts it.
    install_ctrl_c(s)?;
    let history = history_path(history);
    if let Some(h) = &history {
        // A missing history file is a first session, not an error.
        let _ = rl.load_history(h);
    }
    println!(
        "offload REPL on the {} device ({} workers). `:help` lists the commands; Ctrl-C interrupts a launch, Ctrl-D leaves.",
        s.settings.device.name(),
        s.workers()
    );
    loop {
        let (k, c, v) = s.names();
        *names.lock().unwrap_or_else(|e| e.into_inner()) = Names {
            kernels: k,
            classes: c,
            funcs_and_vars: v,
        };
        match rl.readline(PROMPT) {
            Ok(entry) => {
                if entry.trim().is_empty() {
                    continue;
                }
                let _ = rl.add_history_entry(entry.as_str());
                if let Some(h) = &history
                    && let Err(e) = rl.save_history(h)
                {
                    eprintln!("warning: cannot save the history to {}: {e}", h.display());
                }
                if is_quit(&entry) {
                    return Ok(());
                }
                let mut out = String::new();
                let r = s.execute(&entry, "<input>", &mut out);
                print!("{out}");
                if let Err(e) = r {
                    println!("error: {e}");
                }
                let _ = std::io::stdout().flush();
            }
            Err(ReadlineError::Interrupted) => {
                println!("^C (Ctrl-D or :quit leaves)");
            }
            Err(ReadlineError::Eof) => return Ok(()),
            Err(e) => return Err(format!("error: reading a line: {e}")),
        }
    }
}
