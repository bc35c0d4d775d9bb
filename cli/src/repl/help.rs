//! `:help`: every command with an example.

/// One command: its names, synopsis, what it does, and an example.
pub struct Cmd {
    pub names: &'static [&'static str],
    pub synopsis: &'static str,
    pub about: &'static str,
    pub example: &'static str,
}

/// Every command, in the order `:help` lists them.
pub const COMMANDS: &[Cmd] = &[
    Cmd {
        names: &["kernel", "class", "func"],
        synopsis: "kernel|class|func NAME ... { ... }",
        about: "Define, or redefine, a kernel, class or function by typing or pasting .obc text; \
                the entry goes on until its braces close. Redefining reloads every definition \
                (objects made before keep their old class; kernels start again at version 0).",
        example: "kernel inc(i: i64, a: i32[]) {\n    load a\n    load i\n    i64.to_i32\n    load a\n    load i\n    i64.to_i32\n    i32.aload\n    i32.const 1\n    i32.add\n    i32.astore\n    ret\n}",
    },
    Cmd {
        names: &["#[kernel]", "fn", "struct", "impl"],
        synopsis: "#[kernel] fn NAME(i: i32, ...) { ... } | fn | struct | impl",
        about: "Define, or redefine, kernels, functions and classes in the source language \
                (Rust syntax; docs/LANGUAGE.md); the entry goes on until its braces close. \
                Source entries are compiled together, so one may use what another defines; \
                `:bytecode NAME` shows what a definition compiled to.",
        example: "#[kernel]\nfn double(i: i32, xs: &mut [f32]) {\n    xs[i] = 2.0 * xs[i];\n}",
    },
    Cmd {
        names: &[":load", ":l"],
        synopsis: ":load FILE.obc | FILE.ofk",
        about: "Define everything in a bytecode (.obc) or source (.ofk) file (errors name \
                the file, line and column).",
        example: ":load examples/kernels/saxpy.ofk",
    },
    Cmd {
        names: &[":defs"],
        synopsis: ":defs",
        about: "List the definitions and where each came from.",
        example: ":defs",
    },
    Cmd {
        names: &["let"],
        synopsis: "let NAME = TYPE[LEN] [zero | fill V | range [START [STEP]] | random SEED [LO..HI]]\n       let NAME = CLASS[LEN] [null | new [CLASS]]\n       let NAME = new CLASS [FIELD=VALUE ...]\n       let NAME = LITERAL | NAME\n       let NAME = reduce sum|min|max KERNEL RANGE ARGS...",
        about: "Make a host variable: an array of i32, i64, f32, f64 or references to a class, \
                with an initializer (random: uniform in LO..HI, by default 0..100 for integers \
                and 0..1 for floats, from the seed); an object; or a number (2 is an i32, 2i64 \
                an i64, 2.5 an f64, 2.5f32 an f32).",
        example: "let x = f32[1000] random 7\nlet n = 1000\nlet c = new Circle r=2.0",
    },
    Cmd {
        names: &["set"],
        synopsis: "set OBJ.FIELD = VALUE | set ARRAY[I] = VALUE",
        about: "Store into a field of an object or an element of an array.",
        example: "set c.r = 3.5\nset x[0] = 42.0",
    },
    Cmd {
        names: &["print", "p"],
        synopsis: "print NAME | NAME[I] | NAME[A..B] | OBJ.FIELD",
        about: "Show a value, an object's fields, or a slice of an array (the first 16 \
                elements by default).",
        example: "print y[0..8]",
    },
    Cmd {
        names: &[":vars"],
        synopsis: ":vars",
        about: "List the variables with their types.",
        example: ":vars",
    },
    Cmd {
        names: &["run"],
        synopsis: "run KERNEL START..END ARGS...   (or run KERNEL N ARGS... for 0..N)",
        about: "Offload KERNEL over the range with the arguments after the index (variables \
                or literals, which take the parameter's type), and summarize: device, time, \
                completed on the device, deopts by reason, never-ran, replayed, exceptions \
                (the first with its bytecode trace). A kernel that takes its indices as a \
                tuple, `fn k((i, j): (i32, i32), ...)`, runs over a tuple of ranges: \
                `run k (0..h, 0..w) ...`. An integer array the kernel only `atomic_add`s \
                to can be summed into, `sum(bins)`: each CPU slot or GPU block adds to a \
                copy of its own, and the copies are added into it at the end (a \
                histogram without every workitem on the same few words). Ctrl-C \
                interrupts it cleanly.",
        example: "run saxpy 0..1000 2.0 x y",
    },
    Cmd {
        names: &["reduce"],
        synopsis: "reduce sum|min|max KERNEL START..END ARGS...   (or let NAME = reduce ...)",
        about: "Offload a reducing kernel (one that returns a number per workitem, \
                `fn dot(i: i64, x: &[f32], y: &[f32]) -> f32`) over the range and combine \
                its values: summarize as `run` does, then print the result. The values are \
                combined in one fixed tree over the range, so a float sum is the same bits \
                on every run and every device. `let d = reduce sum dot 0..n x y` keeps it.",
        example: "reduce sum dot 0..1000 x y",
    },
    Cmd {
        names: &[":time"],
        synopsis: ":time [N] run KERNEL RANGE ARGS...   (or :time [N] reduce COMBINE KERNEL ...)",
        about: "Run a launch N times (5 by default) and show the min, median and max time.",
        example: ":time 10 run saxpy 0..1000 2.0 x y",
    },
    Cmd {
        names: &[":expect"],
        synopsis: ":expect throws",
        about: "The next run must have workitems that throw (an error if none does). A script \
                (`offload run`) stops with an error at a run whose workitems throw unless \
                `:expect throws` announced it; at the prompt, exceptions are shown and the \
                session goes on either way.",
        example: ":expect throws\nrun checked_div 8 num den q",
    },
    Cmd {
        names: &[":safepoint"],
        synopsis: ":safepoint DELAY | off",
        about: "Request a safepoint DELAY (20ms, 1s, 300us) after the next launch starts, \
                and report how long the workers took to stop.",
        example: ":safepoint 5ms",
    },
    Cmd {
        names: &[":report"],
        synopsis: ":report",
        about: "Show the last launch's summary again.",
        example: ":report",
    },
    Cmd {
        names: &[":deopts"],
        synopsis: ":deopts",
        about: "The Sumatra-style deopt table of the last launch: workitem, action \
                (replayed, replayed and threw, interrupted), deopt bci, reason and the \
                saved frame-state values.",
        example: ":deopts",
    },
    Cmd {
        names: &[":sites"],
        synopsis: ":sites",
        about: "Deopt counters of the last launch, per bytecode index and per site of the \
                version that ran.",
        example: ":sites",
    },
    Cmd {
        names: &[":profile"],
        synopsis: ":profile",
        about: "The last launch's profile: entries, branch counts, receiver classes and nulls \
                per bytecode index (needs `:set profile on` or warm-up launches).",
        example: ":profile",
    },
    Cmd {
        names: &[":info"],
        synopsis: ":info KERNEL",
        about: "What the runtime knows of a kernel: launches, version, speculations, deopt \
                counters per version and site, and the policy's decisions.",
        example: ":info saxpy",
    },
    Cmd {
        names: &[":bytecode", ":bc"],
        synopsis: ":bytecode FUNCTION [A..B | TEXT]",
        about: "The bytecode of a kernel, function or Class.method with the verifier's \
                types: blocks, back-edges, live locals, deopt sites and their typed frame states.\
                 Long views show their first 60 lines; `A..B` shows lines A to B, any other word the lines that contain it.",
        example: ":bytecode saxpy\n:bytecode saxpy deopt",
    },
    Cmd {
        names: &[":clif"],
        synopsis: ":clif KERNEL [A..B | TEXT]",
        about: "The Cranelift IR the CPU device runs for a kernel (after optimization). Long views show their first 60 lines; `A..B` shows lines A to B, any other word the lines that contain it.",
        example: ":clif saxpy\n:clif saxpy 60..120\n:clif saxpy load",
    },
    Cmd {
        names: &[":ptx"],
        synopsis: ":ptx KERNEL [A..B | TEXT]",
        about: "The PTX the CUDA device runs for a kernel (sm_70 and newer). Long views show their first 60 lines; `A..B` shows lines A to B, any other word the lines that contain it.",
        example: ":ptx saxpy\n:ptx saxpy atom",
    },
    Cmd {
        names: &[":meta"],
        synopsis: ":meta KERNEL",
        about: "The deopt metadata of a kernel's current version: save-record layout, sites \
                with their reasons, frames and record words, speculations.",
        example: ":meta saxpy",
    },
    Cmd {
        names: &[":set"],
        synopsis: ":set device cpu|cuda|interp | workers N | policy NAME | speculate N|off\n       \
                   | tlab BYTES|default | inject every N | inject random N seed S | inject off\n       \
                   | fail-refills FIRST EVERY | fail-refills off | profile on|off\n       \
                   | max-heap BYTES | deopt-records N | deadline DURATION|off\n       \
                   | reentry on|off | split off|gpus|cpu+gpus\n\
                   (BYTES takes a K, M or G suffix: 64M)",
        about: "Change a setting. The runtime is rebuilt: definitions are reloaded and \
                variables copied into the new heap (references between them kept).",
        example: ":set device interp\n:set inject every 100",
    },
    Cmd {
        names: &[":settings"],
        synopsis: ":settings",
        about: "Show the settings.",
        example: ":settings",
    },
    Cmd {
        names: &[":heap"],
        synopsis: ":heap",
        about: "Walk and verify the whole heap; show its use, the handles alive and the collections so far.",
        example: ":heap",
    },
    Cmd {
        names: &[":gc"],
        synopsis: ":gc",
        about: "Collect the heap now: free what no variable reaches, and say how much and how long it took.",
        example: ":gc",
    },
    Cmd {
        names: &[":help", ":h"],
        synopsis: ":help [COMMAND]",
        about: "This list, or one command in full.",
        example: ":help run",
    },
    Cmd {
        names: &[":quit", ":q"],
        synopsis: ":quit",
        about: "Leave (Ctrl-D too).",
        example: ":quit",
    },
];

/// Every command name, for completion.
pub fn names() -> impl Iterator<Item = &'static str> {
    COMMANDS.iter().flat_map(|c| c.names.iter().copied())
}

/// The settings `:set` changes, each with the values it takes: the one
/// list that `:help`, `:set`'s errors and its suggestions read.
pub const SETTINGS: [(&str, &str); 13] = [
    ("device", "cpu|cuda|interp"),
    ("workers", "N (at least 1)"),
    ("policy", "NAME"),
    ("speculate", "N|off"),
    ("tlab", "BYTES|default"),
    ("inject", "every N | random N seed S | off"),
    ("fail-refills", "FIRST EVERY | off"),
    ("profile", "on|off"),
    ("max-heap", "BYTES"),
    ("deopt-records", "N (at least 1)"),
    ("deadline", "DURATION|off (like 2s, 500ms)"),
    ("reentry", "on|off"),
    ("split", "off|gpus|cpu+gpus"),
];

/// Every command's names, for suggestions.
pub fn command_names() -> impl Iterator<Item = &'static str> {
    COMMANDS.iter().flat_map(|c| c.names.iter().copied())
}

/// `   (short: :h)` for a command whose other names are short forms of
/// its first (`:help` and `:h`, `print` and `p`), so that every name the
/// REPL accepts — and may suggest — is on the list; nothing otherwise.
fn short_forms(c: &Cmd) -> String {
    let first = c.names[0];
    let short: Vec<&str> = c.names[1..]
        .iter()
        .copied()
        .filter(|n| n.len() < first.len() && first.starts_with(&n[..1]))
        .collect();
    if short.is_empty() {
        String::new()
    } else {
        format!("   (short: {})", short.join(", "))
    }
}

/// `:help` or `:help CMD`.
pub fn help(cmd: Option<&str>) -> Result<String, super::session::ReplError> {
    let mut s = String::new();
    match cmd {
        None => {
            s.push_str("Commands (`:help COMMAND` shows one in full, with an example):\n");
            for c in COMMANDS {
                let first = c.synopsis.lines().next().unwrap_or("");
                if c.names.contains(&":set") {
                    let names: Vec<&str> = SETTINGS.iter().map(|s| s.0).collect();
                    s.push_str(&format!("  :set SETTING VALUE ({})\n", names.join(", ")));
                } else {
                    s.push_str(&format!("  {first}{}\n", short_forms(c)));
                }
            }
            s.push_str("Ctrl-C interrupts a running launch; Ctrl-D or :quit leaves.\n");
        }
        Some(name) => {
            let c = COMMANDS
                .iter()
                .find(|c| {
                    c.names
                        .iter()
                        .any(|n| *n == name || n.trim_start_matches(':') == name)
                })
                .ok_or_else(|| {
                    super::session::ReplError::Entry(format!(
                        "no command `{name}` (`:help` lists them){}",
                        super::suggest::did_you_mean(
                            name,
                            command_names().map(|n| if name.starts_with(':') {
                                n
                            } else {
                                n.trim_start_matches(':')
                            })
                        )
                    ))
                })?;
            s.push_str(&format!("{}\n\n", c.synopsis));
            s.push_str(&textwrap(c.about, 78));
            s.push_str("\n\nExample:\n");
            for l in c.example.lines() {
                s.push_str(&format!("    {l}\n"));
            }
        }
    }
    Ok(s)
}

fn textwrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for w in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + w.len() > width {
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(w);
    }
    out.push_str(&line);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name the REPL accepts for a command (and so may suggest for a
    /// mistyped one, like `:h` for `:he`) is on the `:help` list.
    #[test]
    fn the_list_names_every_command_and_short_form() {
        let list = help(None).unwrap_or_default();
        let words: Vec<&str> = list
            .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')' || c == '|')
            .collect();
        for name in command_names() {
            assert!(
                words.contains(&name),
                "`{name}` is accepted but not listed:\n{list}"
            );
        }
        assert!(list.contains(":help [COMMAND]   (short: :h)"), "{list}");
    }
}
