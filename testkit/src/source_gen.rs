//! Random programs in the source language, for differential tests of the
//! front end: every program is well-typed by construction (so it must
//! compile, and its bytecode must verify), and exercises what a kernel
//! writer uses — `let` with inferred and annotated types, unsuffixed
//! literals, integer and float arithmetic, casts, comparisons and
//! short-circuit logic, `if`/`else` values, `for`/`while`/`loop` with
//! `break` and `continue`, compound assignment, slices, a helper
//! function, a class with a virtual method, `Option` and atomics.
//! Workitems may throw (an index out of bounds, a division by zero):
//! the devices must agree on that too.

use crate::reference::Rng;
use std::fmt::Write;

/// A program: one kernel `k(i: i32, a: i32, b: f64, xs: &mut [i32], ys:
/// &mut [f64], n: Cell)`-shaped module with helpers, from `seed`.
pub fn program(seed: u64) -> String {
    let mut g = Gen {
        rng: Rng::new(seed),
        ints: vec!["i".into(), "a".into()],
        floats: vec!["b".into()],
        mut_ints: Vec::new(),
        mut_floats: Vec::new(),
        depth: 0,
        fresh: 0,
        loops: 0,
    };
    let mut body = String::new();
    let n = 3 + g.rng.below(5);
    for _ in 0..n {
        g.stmt(&mut body, 1);
    }
    // Every workitem leaves a trace of its locals in the heap.
    let ints = g.mut_ints.clone();
    let floats = g.mut_floats.clone();
    for v in ints.iter().take(2) {
        let _ = writeln!(body, "    atomic_add(&mut xs[0], {v});");
    }
    for v in floats.iter().take(2) {
        let _ = writeln!(body, "    ys[i % ys.len()] = {v};");
    }
    let _ = writeln!(body, "    cell.hits += 1;");
    format!(
        "struct Cell {{
    hits: i32,
    next: Option<Cell>,
}}

impl Cell {{
    fn weight(&self, x: f64) -> f64 {{
        x * 0.5 + self.hits as f64
    }}
}}

fn mix(x: i32, y: f64) -> f64 {{
    if x > 0 {{ y * 2.0 - x as f64 }} else {{ y + 1.5 }}
}}

#[kernel]
fn k(i: i32, a: i32, b: f64, xs: &mut [i32], ys: &mut [f64], cell: Cell) {{
{body}}}
"
    )
}

struct Gen {
    rng: Rng,
    ints: Vec<String>,
    floats: Vec<String>,
    mut_ints: Vec<String>,
    mut_floats: Vec<String>,
    depth: u32,
    fresh: u32,
    loops: u32,
}

impl Gen {
    fn pick(&mut self, v: &[String]) -> String {
        v[self.rng.below(v.len() as u64) as usize].clone()
    }

    fn name(&mut self) -> String {
        self.fresh += 1;
        format!("v{}", self.fresh)
    }

    /// An index into a slice of length `len`: in range unless the
    /// program means to throw.
    fn index(&mut self, slice: &str) -> String {
        let e = self.int(1);
        match self.rng.below(6) {
            0 => e,
            _ => format!("({e}).abs() % {slice}.len()"),
        }
    }

    fn int(&mut self, d: u32) -> String {
        if d > 3 {
            return self.int_leaf();
        }
        match self.rng.below(9) {
            0..=2 => self.int_leaf(),
            3 => {
                let op = ["+", "-", "*", "&", "|", "^"][self.rng.below(6) as usize];
                format!("({} {op} {})", self.int(d + 1), self.int(d + 1))
            }
            4 => format!("({} << {})", self.int(d + 1), self.rng.below(5)),
            5 => format!("({} % ({}))", self.int(d + 1), self.int(d + 1)),
            6 => format!("({} as i32)", self.float(d + 1)),
            7 => {
                let i = self.index("xs");
                format!("xs[{i}]")
            }
            _ => format!(
                "(if {} {{ {} }} else {{ {} }})",
                self.cond(d + 1),
                self.int(d + 1),
                self.int(d + 1)
            ),
        }
    }

    fn int_leaf(&mut self) -> String {
        match self.rng.below(3) {
            0 => format!("{}", self.rng.below(20) as i64 - 5),
            _ => {
                let all = self.ints.clone();
                self.pick(&all)
            }
        }
    }

    fn float(&mut self, d: u32) -> String {
        if d > 3 {
            return self.float_leaf();
        }
        match self.rng.below(9) {
            0..=2 => self.float_leaf(),
            3 => {
                let op = ["+", "-", "*", "/"][self.rng.below(4) as usize];
                format!("({} {op} {})", self.float(d + 1), self.float(d + 1))
            }
            4 => format!("({} as f64)", self.int(d + 1)),
            5 => {
                let m = ["sqrt", "abs", "floor", "exp", "sin"][self.rng.below(5) as usize];
                format!("({}).{m}()", self.float(d + 1))
            }
            6 => format!("mix({}, {})", self.int(d + 1), self.float(d + 1)),
            7 => {
                let i = self.index("ys");
                format!("ys[{i}]")
            }
            _ => format!("cell.weight({})", self.float(d + 1)),
        }
    }

    fn float_leaf(&mut self) -> String {
        match self.rng.below(3) {
            0 => format!("{:.2}", self.rng.f32_in(-4.0, 4.0)),
            _ => {
                let all = self.floats.clone();
                self.pick(&all)
            }
        }
    }

    fn cond(&mut self, d: u32) -> String {
        match self.rng.below(5) {
            0 => format!("{} < {}", self.int(d + 1), self.int(d + 1)),
            1 => format!("{} >= {}", self.float(d + 1), self.float(d + 1)),
            2 if d < 3 => format!("({} && {})", self.cond(d + 1), self.cond(d + 1)),
            3 if d < 3 => format!("(!({}) || {})", self.cond(d + 1), self.cond(d + 1)),
            _ => format!("{} == {}", self.int(d + 1), self.int(d + 1)),
        }
    }

    fn stmt(&mut self, out: &mut String, ind: usize) {
        let pad = "    ".repeat(ind);
        self.depth += 1;
        let choice = if self.depth > 3 {
            self.rng.below(4)
        } else {
            self.rng.below(9)
        };
        match choice {
            0 => {
                let v = self.name();
                let e = self.int(0);
                let _ = writeln!(out, "{pad}let mut {v} = {e};");
                self.ints.push(v.clone());
                self.mut_ints.push(v);
            }
            1 => {
                let v = self.name();
                let e = self.float(0);
                let annot = if self.rng.below(2) == 0 { ": f64" } else { "" };
                let _ = writeln!(out, "{pad}let mut {v}{annot} = {e};");
                self.floats.push(v.clone());
                self.mut_floats.push(v);
            }
            2 if !self.mut_ints.is_empty() => {
                let all = self.mut_ints.clone();
                let v = self.pick(&all);
                let op = ["+=", "-=", "*=", "^=", "<<="][self.rng.below(5) as usize];
                let e = if op == "<<=" {
                    format!("{}", self.rng.below(4))
                } else {
                    self.int(1)
                };
                let _ = writeln!(out, "{pad}{v} {op} {e};");
            }
            3 => {
                let i = self.index("ys");
                let e = self.float(0);
                let _ = writeln!(out, "{pad}ys[{i}] += {e};");
            }
            4 => {
                let c = self.cond(0);
                let _ = writeln!(out, "{pad}if {c} {{");
                self.block(out, ind + 1);
                let _ = writeln!(out, "{pad}}} else {{");
                self.block(out, ind + 1);
                let _ = writeln!(out, "{pad}}}");
            }
            5 => {
                self.loops += 1;
                let k = format!("k{}", self.loops);
                let n = self.rng.below(6);
                let _ = writeln!(out, "{pad}for {k} in 0..{n} {{");
                self.ints.push(k.clone());
                let c = self.cond(1);
                let _ = writeln!(out, "{pad}    if {c} {{ continue; }}");
                self.block(out, ind + 1);
                let _ = writeln!(out, "{pad}}}");
                self.ints.retain(|x| *x != k);
            }
            6 => {
                self.loops += 1;
                let w = format!("w{}", self.loops);
                let _ = writeln!(out, "{pad}let mut {w} = 0;");
                let _ = writeln!(out, "{pad}loop {{");
                let _ = writeln!(out, "{pad}    {w} += 1;");
                let c = self.cond(1);
                let _ = writeln!(out, "{pad}    if {w} > 4 || {c} {{ break; }}");
                self.block(out, ind + 1);
                let _ = writeln!(out, "{pad}}}");
            }
            7 => {
                let v = self.name();
                let _ = writeln!(
                    out,
                    "{pad}let mut {v} = Cell {{ hits: {}, next: None }};",
                    self.int(1)
                );
                let _ = writeln!(out, "{pad}{v}.next = Some(cell);");
                let _ = writeln!(out, "{pad}if let Some(c) = {v}.next {{");
                let _ = writeln!(out, "{pad}    c.hits += {};", self.int(2));
                let _ = writeln!(out, "{pad}}}");
            }
            _ => {
                let i = self.index("xs");
                let e = self.int(0);
                let _ = writeln!(out, "{pad}xs[{i}] = {e};");
            }
        }
        self.depth -= 1;
    }

    /// A block's statements; names declared in it go out of scope after.
    fn block(&mut self, out: &mut String, ind: usize) {
        let (ni, nf, nmi, nmf) = (
            self.ints.len(),
            self.floats.len(),
            self.mut_ints.len(),
            self.mut_floats.len(),
        );
        for _ in 0..1 + self.rng.below(3) {
            self.stmt(out, ind);
        }
        self.ints.truncate(ni);
        self.floats.truncate(nf);
        self.mut_ints.truncate(nmi);
        self.mut_floats.truncate(nmf);
    }
}
