//! The free variables of a closure: the names its body uses that it does
//! not bind (the captures of `kernel!(move |i| ...)`), in order of first
//! use.

use syn::visit::Visit;

/// The names `c`'s body reads from its environment, in order of first use:
/// every single-name path that no parameter, `let`, `for`, `if let` or
/// `while let` of the closure binds where it is used. Function names,
/// class names, `None` and `Some` are not variables.
pub fn free_variables(c: &syn::ExprClosure) -> Vec<String> {
    let mut f = Free::default();
    f.scopes.push(Vec::new());
    for p in &c.inputs {
        f.bind_pat(p);
    }
    f.visit_expr(&c.body);
    f.free
}

#[derive(Default)]
struct Free {
    scopes: Vec<Vec<String>>,
    free: Vec<String>,
}

impl Free {
    fn bound(&self, n: &str) -> bool {
        self.scopes.iter().any(|s| s.iter().any(|b| b == n))
    }

    fn bind_pat(&mut self, p: &syn::Pat) {
        match p {
            syn::Pat::Ident(pi) => {
                self.scopes
                    .last_mut()
                    .expect("a scope")
                    .push(pi.ident.to_string());
            }
            syn::Pat::Type(pt) => self.bind_pat(&pt.pat),
            syn::Pat::TupleStruct(ts) => {
                for e in &ts.elems {
                    self.bind_pat(e);
                }
            }
            syn::Pat::Tuple(t) => {
                for e in &t.elems {
                    self.bind_pat(e);
                }
            }
            _ => {}
        }
    }

    fn scoped(&mut self, f: impl FnOnce(&mut Self)) {
        self.scopes.push(Vec::new());
        f(self);
        self.scopes.pop();
    }

    /// The expressions inside a macro the kernel subset knows (`vec![x;
    /// n]`, `assert!(c, ..)`): their names are uses too.
    fn macro_exprs(&mut self, m: &syn::Macro) {
        use syn::parse::Parser;
        // `throw!(Kind)` names an exception, and `panic!`'s arguments are
        // not kept: only these two hold expressions the kernel evaluates.
        if !(m.path.is_ident("vec") || m.path.is_ident("assert")) {
            return;
        }
        let exprs = |input: syn::parse::ParseStream| {
            let mut out = Vec::new();
            while !input.is_empty() {
                out.push(input.parse::<syn::Expr>()?);
                if input.is_empty() {
                    break;
                }
                if input.peek(syn::Token![;]) {
                    input.parse::<syn::Token![;]>()?;
                } else {
                    input.parse::<syn::Token![,]>()?;
                }
            }
            Ok(out)
        };
        if let Ok(es) = exprs.parse2(m.tokens.clone()) {
            for e in &es {
                self.visit_expr(e);
            }
        }
    }
}

impl<'a> Visit<'a> for Free {
    fn visit_block(&mut self, b: &'a syn::Block) {
        self.scoped(|f| {
            for s in &b.stmts {
                match s {
                    syn::Stmt::Local(l) => {
                        if let Some(init) = &l.init {
                            f.visit_expr(&init.expr);
                        }
                        f.bind_pat(&l.pat);
                    }
                    syn::Stmt::Macro(m) => f.macro_exprs(&m.mac),
                    s => f.visit_stmt(s),
                }
            }
        });
    }

    fn visit_expr_path(&mut self, p: &'a syn::ExprPath) {
        if let Some(id) = p.path.get_ident() {
            let n = id.to_string();
            if n != "None" && n != "self" && !self.bound(&n) && !self.free.contains(&n) {
                self.free.push(n);
            }
        }
    }

    fn visit_expr_call(&mut self, c: &'a syn::ExprCall) {
        // The callee is a function's name, not a variable.
        if !matches!(&*c.func, syn::Expr::Path(_)) {
            self.visit_expr(&c.func);
        }
        for a in &c.args {
            self.visit_expr(a);
        }
    }

    fn visit_expr_struct(&mut self, s: &'a syn::ExprStruct) {
        for f in &s.fields {
            self.visit_expr(&f.expr);
        }
    }

    fn visit_expr_for_loop(&mut self, f: &'a syn::ExprForLoop) {
        self.visit_expr(&f.expr);
        self.scoped(|v| {
            v.bind_pat(&f.pat);
            v.visit_block(&f.body);
        });
    }

    fn visit_expr_if(&mut self, i: &'a syn::ExprIf) {
        self.scoped(|v| {
            if let syn::Expr::Let(l) = &*i.cond {
                v.visit_expr(&l.expr);
                v.bind_pat(&l.pat);
            } else {
                v.visit_expr(&i.cond);
            }
            v.visit_block(&i.then_branch);
        });
        if let Some((_, e)) = &i.else_branch {
            self.visit_expr(e);
        }
    }

    fn visit_expr_while(&mut self, w: &'a syn::ExprWhile) {
        self.scoped(|v| {
            if let syn::Expr::Let(l) = &*w.cond {
                v.visit_expr(&l.expr);
                v.bind_pat(&l.pat);
            } else {
                v.visit_expr(&w.cond);
            }
            v.visit_block(&w.body);
        });
    }

    fn visit_expr_closure(&mut self, c: &'a syn::ExprClosure) {
        self.scoped(|v| {
            for p in &c.inputs {
                v.bind_pat(p);
            }
            v.visit_expr(&c.body);
        });
    }

    fn visit_expr_macro(&mut self, m: &'a syn::ExprMacro) {
        self.macro_exprs(&m.mac);
    }

    fn visit_expr_method_call(&mut self, m: &'a syn::ExprMethodCall) {
        self.visit_expr(&m.receiver);
        for a in &m.args {
            self.visit_expr(a);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free(src: &str) -> Vec<String> {
        free_variables(&syn::parse_str(src).unwrap())
    }

    #[test]
    fn captures_are_the_names_the_body_does_not_bind() {
        assert_eq!(free("move |i| y[i] = a * x[i] + y[i]"), ["y", "a", "x"]);
        assert_eq!(
            free("|i| { let mut s = 0.0; for k in 0..n { s += m[k]; } out[i] = s * scale; }"),
            ["n", "m", "out", "scale"]
        );
        // Used before the `let` that shadows it: a capture.
        assert_eq!(free("|i| { let t = t + 1; out[i] = t; }"), ["t", "out"]);
        // Calls, struct names, None and macros.
        assert_eq!(
            free("|i| { let v = vec![0.0; len]; if let Some(p) = head { q[i] = f(p, w); } }"),
            ["len", "head", "q", "w"]
        );
        assert_eq!(
            free("|i| { assert!(i < lim, \"small\"); if i == k { throw!(IllegalState); } }"),
            ["lim", "k"]
        );
    }
}
