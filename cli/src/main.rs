//! The `offload` command-line tool.

use clap::{Parser, Subcommand};
use offload::diagnostics::render_all;
use offload::ir;
use std::path::PathBuf;
use std::process::ExitCode;

mod repl;
mod sigpipe;

/// The runtime a REPL session starts with (`:set` changes it later).
#[derive(clap::Args, Debug)]
struct SessionArgs {
    /// The device: cpu, cuda or interp.
    #[arg(long, default_value = "cpu")]
    device: offload::Device,
    /// Worker threads (default: every core).
    #[arg(long)]
    workers: Option<usize>,
    /// Interrupt a launch still running after this long (like 2s, 500ms),
    /// as Ctrl-C does: a kernel that never ends cannot hang a script.
    #[arg(long, value_parser = deadline)]
    deadline: Option<std::time::Duration>,
}

fn deadline(s: &str) -> Result<std::time::Duration, String> {
    match repl::parse_duration(s).map_err(|e| e.to_string())? {
        std::time::Duration::ZERO => Err("a deadline must be longer than 0".into()),
        d => Ok(d),
    }
}

impl SessionArgs {
    fn settings(&self) -> repl::Settings {
        repl::Settings {
            device: self.device,
            workers: self.workers,
            deadline: self.deadline,
            ..repl::Settings::default()
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "offload",
    version,
    about = "Run data-parallel bytecode kernels on a GPU or every CPU core"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The interactive REPL: define classes and kernels, make arrays and
    /// objects, offload ranges, inspect deopts and code (`:help` inside).
    /// Reads entries from standard input when it is not a terminal.
    Repl {
        #[command(flatten)]
        session: SessionArgs,
        /// The history file (default: $OFFLOAD_HISTORY, else
        /// ~/.offload_history).
        #[arg(long)]
        history: Option<PathBuf>,
    },
    /// Run a script of REPL entries (`.ofs`), stopping at the first error.
    /// The main job is the guided tour: `offload run examples/tour.ofs --echo`.
    Run {
        /// The script.
        file: PathBuf,
        #[command(flatten)]
        session: SessionArgs,
        /// Print each entry after a prompt before its output, like a session.
        #[arg(long)]
        echo: bool,
    },
    /// Parse and verify bytecode (`.obc`) and source (`.ofk`) files,
    /// reporting every error.
    Check {
        /// The files to check.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Also print the bytecode each file holds (for a source file:
        /// what it compiles to).
        #[arg(long)]
        bytecode: bool,
    },
    /// List the bytecode's instructions: operands, stack effect (bottom of
    /// the stack first), what may make each a deopt site, and what it does.
    Isa {
        /// Only this instruction, or those starting with it (`f32.`).
        name: Option<String>,
    },
    /// Print a bytecode file (`.obc`) in canonical form (source files are
    /// Rust syntax: rustfmt formats them).
    Fmt {
        /// The files to format (one, unless with --write or --check).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Rewrite the files in place instead of printing them.
        #[arg(long)]
        write: bool,
        /// Exit non-zero if a file is not in canonical form, showing how it
        /// differs (a unified diff).
        #[arg(long, conflicts_with = "write")]
        check: bool,
    },
    /// Run every example kernel through the public API and check each result
    /// against native Rust, with timings.
    Demo {
        /// Worker threads (default: every core).
        #[arg(long)]
        workers: Option<usize>,
        /// Divide every problem size by this (for quick runs).
        #[arg(long, default_value_t = 1)]
        shrink: usize,
        /// Allocation policy: shared[:N], fail-on-overflow[:N], private, eden-cas.
        #[arg(long, default_value = "shared:1")]
        alloc: offload::AllocPolicy,
        /// Device: cpu (the Cranelift JIT, falling back to the interpreter
        /// for what it does not compile yet), cuda (an NVIDIA GPU, falling
        /// back to the CPU device, reported) or interp.
        #[arg(long, default_value = "cpu")]
        device: offload::Device,
        /// Make any fallback (no GPU, a kernel the PTX backend does not
        /// compile) an error.
        #[arg(long)]
        strict: bool,
    },
    /// Benchmark offload against native Rust in the same run: compute
    /// kernels against rayon, forced deopt rates against none, compile
    /// latency. The ratio is the slowdown, offload time ÷ baseline time
    /// (1.00x: as fast; above: slower).
    Bench {
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
        /// Device: cpu, cuda or interp.
        #[arg(long, default_value = "cpu")]
        device: offload::Device,
        /// Make any fallback an error.
        #[arg(long)]
        strict: bool,
        /// Worker threads (default: every core).
        #[arg(long)]
        workers: Option<usize>,
        /// Divide every problem size by this (for quick runs).
        #[arg(long, default_value_t = 1)]
        shrink: usize,
        /// Timed repetitions per measurement (the median is reported).
        #[arg(long, default_value_t = 7)]
        reps: usize,
        /// With `--device cuda`: instead of times, each example kernel's
        /// counters beside CUDA C's (instructions per item, memory sectors,
        /// atomics, driver calls and host syncs per warm launch — exact on
        /// the virtual GPU — registers from ptxas, and on a real GPU the
        /// times) with their ratios.
        #[arg(long)]
        counters: bool,
        /// Answer timing requests instead: JSON lines on standard input,
        /// from `scripts/bench-peers` (which times Numba by turns with
        /// offload and rayon).
        #[arg(long)]
        serve: bool,
    },
    /// Compare recompilation policies on workloads: repeated launches under
    /// each policy, with total time, work on the device vs replayed, deopts
    /// by reason, recompiles and final decisions.
    Experiment {
        /// The workload (stable, phase-change, rare-null, megamorphic,
        /// alloc-pressure, safepoint-storm).
        #[arg(long, required_unless_present = "all")]
        workload: Option<String>,
        /// The policy (never, trap-limit, deopt-rate, cost-model); repeat
        /// for several; default: every policy.
        #[arg(long)]
        policy: Vec<String>,
        /// Every workload under every policy.
        #[arg(long, conflicts_with = "workload")]
        all: bool,
        /// Launches per run, warm-up included.
        #[arg(long, default_value_t = 20)]
        launches: u32,
        /// Workitems per launch.
        #[arg(long, default_value_t = 1 << 16)]
        items: usize,
        /// Warm-up launches profiled in the interpreter.
        #[arg(long, default_value_t = 1)]
        warmup: u32,
        /// Device: cpu, cuda or interp.
        #[arg(long, default_value = "cpu")]
        device: offload::Device,
        /// Worker threads (default: every core).
        #[arg(long)]
        workers: Option<usize>,
        /// Also run each workload on the interpreter and check that every
        /// policy's outputs equal it.
        #[arg(long)]
        check: bool,
        /// Write per-launch rows as CSV here.
        #[arg(long)]
        csv: Option<PathBuf>,
        /// Write an SVG plot of cumulative time per policy here.
        #[arg(long)]
        svg: Option<PathBuf>,
        /// Print every policy decision as it is made.
        #[arg(long)]
        log: bool,
        /// Runs of each workload under each policy; the table shows the
        /// median and the fastest and slowest.
        #[arg(long, default_value_t = 3)]
        repeat: u32,
    },
    /// Print the PTX the CUDA device runs for a kernel (sm_70 and newer).
    Ptx {
        /// The file.
        file: PathBuf,
        /// The kernel.
        #[arg(long)]
        kernel: String,
        /// Also assemble it with ptxas for sm_70, sm_80 and sm_90.
        #[arg(long)]
        check: bool,
    },
    /// Show the verifier's types and the shared analyses (blocks, back-edges,
    /// liveness, deopt sites with frame states) of a file's functions.
    Analyze {
        /// The file.
        file: PathBuf,
        /// Only this function (`name` or `Class.method`).
        #[arg(long)]
        func: Option<String>,
    },
}

fn read(path: &std::path::Path) -> Result<String, String> {
    offload::diagnostics::read_source(path).map_err(|e| format!("error: {e}"))
}

/// Whether `path` is a source file (`.ofk`) rather than bytecode.
fn is_source(path: &std::path::Path) -> bool {
    path.extension()
        .is_some_and(|e| e == offload::lang::EXTENSION)
}

/// Read, parse (or compile, for a source file) and verify `path`.
fn load(path: &std::path::Path) -> Result<(String, ir::Verified), String> {
    let src = read(path)?;
    let name = path.display().to_string();
    let loaded = if is_source(path) {
        offload::lang::compile_verified(&name, &src)
    } else {
        ir::load(&name, &src)
    };
    match loaded {
        Ok(v) => Ok((src, v)),
        Err(ds) => Err(format!(
            "{}error: {} found {} problem(s)",
            render_all(&ds.0, &src),
            name,
            ds.0.len()
        )),
    }
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Repl { session, history } => repl::repl(session.settings(), history),
        Command::Run {
            file,
            session,
            echo,
        } => repl::script(session.settings(), &file, echo),
        Command::Isa { name } => {
            print!("{}", offload_cli::tools::isa::table(name.as_deref())?);
            Ok(())
        }
        Command::Check { files, bytecode } => {
            let mut failed = 0;
            for f in &files {
                match load(f) {
                    Ok((_, v)) => {
                        if bytecode {
                            print!("{}", ir::print_module(&v));
                        }
                        let kernels = v.kernels().count();
                        println!(
                            "ok {} ({} functions, {} kernels)",
                            f.display(),
                            v.funcs.len(),
                            kernels
                        );
                    }
                    Err(e) => {
                        eprintln!("{e}");
                        failed += 1;
                    }
                }
            }
            if failed > 0 {
                return Err(format!("error: {failed} of {} file(s) failed", files.len()));
            }
            Ok(())
        }
        Command::Fmt {
            files,
            write,
            check,
        } => fmt(&files, write, check),
        Command::Demo {
            workers,
            shrink,
            alloc,
            device,
            strict,
        } => {
            let mut b = offload::Runtime::builder()
                .alloc_policy(alloc)
                .device(device)
                .strict(strict);
            if let Some(w) = workers {
                b = b.workers(w);
            }
            let rt = b.build().map_err(|e| format!("error: {e}"))?;
            println!(
                "offload demo: {} workers on the {} device, allocation policy {alloc}",
                rt.workers(),
                rt.device().name()
            );
            if let Some(why) = rt.fallback() {
                println!("note: {why}");
            }
            if let Some(g) = rt.gpu() {
                println!("GPU: {g}");
            }
            let rows =
                offload_cli::tools::demo::run(&rt, offload_cli::tools::demo::Sizes { shrink })
                    .map_err(|e| format!("error: {e}"))?;
            print!("{}", offload_cli::tools::demo::table(&rows));
            for r in &rows {
                if let Some(d) = &r.deopts {
                    print!("\n{d}");
                }
            }
            let failed = rows.iter().filter(|r| !r.ok).count();
            if failed > 0 {
                return Err(format!(
                    "error: {failed} example(s) did not match native Rust"
                ));
            }
            println!("all {} examples match native Rust", rows.len());
            Ok(())
        }
        Command::Bench {
            json,
            device,
            workers,
            shrink,
            reps,
            strict,
            serve,
            counters,
        } => {
            let mut b = offload::Runtime::builder().device(device).strict(strict);
            if let Some(w) = workers {
                b = b.workers(w);
            }
            let rt = b.build().map_err(|e| format!("error: {e}"))?;
            if counters {
                return offload_cli::tools::bench_counters::command(&rt, shrink, reps.max(1), json)
                    .map_err(|e| format!("error: {e}"));
            }
            if serve {
                return offload_cli::tools::bench_peers::serve(
                    &rt,
                    std::io::stdin().lock(),
                    std::io::stdout().lock(),
                )
                .map_err(|e| format!("error: {e}"));
            }
            let mut rows = offload_cli::tools::bench::run(&rt, shrink, reps.max(1))
                .map_err(|e| format!("error: {e}"))?;
            // NVRTC's PTX for the CUDA C baselines calls device `malloc` and
            // approximate math, which the virtual GPU does not model.
            if rt.device() == offload::Device::Cuda && !rt.gpu_is_virtual() {
                rows.extend(
                    offload_cli::tools::bench::run_cuda_c(&rt, shrink, reps.max(1))
                        .map_err(|e| format!("error: {e}"))?,
                );
            }
            // On the GPU, the bytes saxpy's launches move (exact on the
            // virtual GPU too).
            // and launches under host safepoints, the slots waiting in place
            // or leaving the grid.
            let (transfers, waits) = if rt.device() == offload::Device::Cuda {
                (
                    Some(
                        offload_cli::tools::bytes::saxpy(&rt, shrink)
                            .map_err(|e| format!("error: {e}"))?,
                    ),
                    offload_cli::tools::waits::run(&rt, shrink)
                        .map_err(|e| format!("error: {e}"))?,
                )
            } else {
                (None, Vec::new())
            };
            if json {
                for r in &rows {
                    println!("{}", r.json());
                }
                if let Some(t) = &transfers {
                    println!("{}", t.json());
                }
                for w in &waits {
                    println!("{}", w.json());
                }
            } else {
                println!(
                    "offload bench: {} workers on the {} device (slowdown = offload time ÷ baseline time: 1.00x is as fast, above is slower)",
                    rt.workers(),
                    rt.device().name()
                );
                if let Some(why) = rt.fallback() {
                    println!("note: {why}");
                }
                print!("{}", offload_cli::tools::bench::table(&rows));
                if let Some(t) = &transfers {
                    print!("{}", t.table());
                }
                if !waits.is_empty() {
                    print!("{}", offload_cli::tools::waits::table(&waits));
                }
            }
            Ok(())
        }
        Command::Experiment {
            workload,
            policy,
            all,
            launches,
            items,
            warmup,
            device,
            workers,
            check,
            csv,
            svg,
            log,
            repeat,
        } => experiment(
            workload,
            policy,
            all,
            offload_cli::tools::experiment::Config {
                device,
                launches,
                items,
                warmup,
                workers,
                check,
                repeat,
            },
            csv,
            svg,
            log,
        ),
        Command::Ptx {
            file,
            kernel,
            check,
        } => {
            let rt = offload::Runtime::builder()
                .device(offload::Device::Interpreter)
                .build()
                .map_err(|e| format!("error: {e}"))?;
            let m = rt.load_file(&file).map_err(|e| format!("{e}"))?;
            let prog = m.program();
            let k = prog
                .verified()
                .func_named(&kernel)
                .filter(|&k| prog.is_kernel(k))
                .ok_or_else(|| {
                    format!(
                        "error: no kernel `{kernel}` in {} (kernels: {})",
                        file.display(),
                        m.kernels().join(", ")
                    )
                })?;
            let p = offload::jit::ptx::compile(prog, k, 0, Default::default())
                .map_err(|e| format!("error: kernel `{kernel}`: {e}"))?;
            print!("{}", p.text);
            if check {
                let ptxas = offload::jit::ptxas::find().map_err(|e| format!("error: {e}"))?;
                for arch in offload::jit::ptxas::ARCHES {
                    offload::jit::ptxas::assemble(&ptxas, &p.text, arch)
                        .map_err(|e| format!("error: {e}"))?;
                    eprintln!("ptxas -arch={arch}: ok");
                }
            }
            Ok(())
        }
        Command::Analyze { file, func } => {
            let (_, v) = load(&file)?;
            let ids: Vec<ir::FuncId> =
                match &func {
                    Some(name) => vec![v.func_named(name).ok_or_else(|| {
                        format!("error: no function `{name}` in {}", file.display())
                    })?],
                    None => (0..v.funcs.len())
                        .map(ir::FuncId::new)
                        .filter(|&f| !v.func(f).is_abstract())
                        .collect(),
                };
            for f in ids {
                print!("{}", ir::analysis::dump(&v, f));
            }
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    sigpipe::default_disposition();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

#[allow(clippy::too_many_arguments, clippy::fn_params_excessive_bools)]
/// `offload fmt`: print one file in canonical form, or rewrite or check
/// every file given; every file is looked at, and the errors counted.
fn fmt(files: &[PathBuf], write: bool, check: bool) -> Result<(), String> {
    if files.len() > 1 && !write && !check {
        return Err(
            "error: `offload fmt` prints one file; give --write or --check to format several"
                .into(),
        );
    }
    let mut failed = 0;
    for file in files {
        let name = file.display().to_string();
        if file
            .extension()
            .is_some_and(|e| e == offload::lang::EXTENSION)
        {
            eprintln!(
                "error: {name} is source (Rust syntax): `offload fmt` formats bytecode (.obc) files; format source with rustfmt (`rustfmt --edition 2024 {name}`)"
            );
            failed += 1;
            continue;
        }
        let r = read(file).and_then(|src| {
            let module = ir::parse_module(&name, &src)
                .map_err(|ds| format!("{}error: cannot format {name}", render_all(&ds.0, &src)))?;
            Ok((src, ir::print_module(&module)))
        });
        let (src, text) = match r {
            Ok(x) => x,
            Err(e) => {
                eprintln!("{e}");
                failed += 1;
                continue;
            }
        };
        if write {
            if text != src {
                std::fs::write(file, &text)
                    .map_err(|e| format!("error: cannot write {name}: {e}"))?;
                println!("formatted {name}");
            }
        } else if check {
            if text != src {
                let diff = similar::TextDiff::from_lines(&src, &text);
                eprint!(
                    "{}",
                    diff.unified_diff()
                        .context_radius(2)
                        .header(&name, &format!("{name} (canonical)"))
                );
                eprintln!(
                    "error: {name} is not in canonical form (`offload fmt --write {name}` rewrites it)"
                );
                failed += 1;
            }
        } else {
            print!("{text}");
        }
    }
    if failed > 0 {
        return Err(format!("error: {failed} of {} file(s) failed", files.len()));
    }
    Ok(())
}

fn experiment(
    workload: Option<String>,
    policies: Vec<String>,
    all: bool,
    cfg: offload_cli::tools::experiment::Config,
    csv: Option<PathBuf>,
    svg: Option<PathBuf>,
    log: bool,
) -> Result<(), String> {
    use offload::policy::NAMES;
    use offload_cli::tools::experiment::{self, WORKLOADS};
    let workloads: Vec<String> = if all {
        WORKLOADS.iter().map(ToString::to_string).collect()
    } else {
        let w = workload.unwrap_or_default();
        if experiment::source(&w).is_none() {
            return Err(format!(
                "error: unknown workload `{w}` (available: {})",
                WORKLOADS.join(", ")
            ));
        }
        vec![w]
    };
    let policies: Vec<String> = if policies.is_empty() {
        NAMES.iter().map(ToString::to_string).collect()
    } else {
        policies
    };
    if let Some(bad) = policies
        .iter()
        .find(|p| offload::policy::by_name(p).is_none())
    {
        return Err(format!(
            "error: unknown policy `{bad}` (available: {})",
            NAMES.join(", ")
        ));
    }
    let (launches, items, warmup) = (cfg.launches, cfg.items, cfg.warmup);
    if launches == 0 || items == 0 || cfg.repeat == 0 {
        return Err("error: --launches, --items and --repeat must be at least 1".into());
    }
    if warmup >= launches {
        return Err(format!(
            "error: --warmup {warmup} leaves no launch to time of --launches {launches}"
        ));
    }
    let total =
        (workloads.len() * policies.len()) as u64 * u64::from(launches) * u64::from(cfg.repeat);
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} launches {msg}")
            .map_err(|e| format!("error: {e}"))?,
    );
    let mut results = Vec::new();
    for w in &workloads {
        for p in &policies {
            bar.set_message(format!("{w} / {p}"));
            let r = experiment::run(w, p, &cfg, &|| bar.inc(1))
                .map_err(|e| format!("error: {w} under {p}: {e}"))?;
            if log {
                for d in r.launches.iter().filter_map(|l| l.decision.as_ref()) {
                    bar.suspend(|| eprintln!("{w} / {p}: {d}"));
                }
            }
            results.push(r);
        }
    }
    bar.finish_and_clear();
    println!(
        "offload experiment: {launches} launches of {items} workitems on the {} device, each (workload, policy) run {} times; times leave out the {warmup} warm-up launch(es)",
        cfg.device.name(),
        cfg.repeat,
    );
    let changing: Vec<&str> = workloads
        .iter()
        .map(String::as_str)
        .filter(|w| experiment::has_phase(w))
        .collect();
    println!(
        "times: median run, its fastest and slowest; vs best: median ÷ the best policy's (~: the runs overlap the best's, so the difference is within noise); counts are the first run's"
    );
    if !changing.is_empty() {
        println!(
            "inputs change at launch {} in {}",
            cfg.phase_launch(),
            changing.join(", ")
        );
    }
    if let Some(why) = results.iter().find_map(|r| r.fallback.as_deref()) {
        println!("note: {why}");
    }
    print!("{}", experiment::table(&results));
    if let Some(path) = csv {
        let text =
            offload_cli::tools::experiment_out::csv(&results).map_err(|e| format!("error: {e}"))?;
        std::fs::write(&path, text)
            .map_err(|e| format!("error: cannot write {}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = svg {
        offload_cli::tools::experiment_out::svg(&results, &cfg, &path)
            .map_err(|e| format!("error: {e}"))?;
        println!("wrote {}", path.display());
    }
    if results.iter().any(|r| r.matches_interpreter == Some(false)) {
        return Err("error: some outputs differ from the interpreter's".into());
    }
    Ok(())
}
