//! `offload-macros`: kernels written in Rust code. Use them through the
//! `offload` crate (`offload::kernel!`, `offload::kernels!`), whose docs
//! have the examples.
//!
//! - `kernel!(move |i| y[i] = a * x[i] + y[i])` makes a closure kernel:
//!   its captures are the closure's free variables, each checked at
//!   compile time to be a value a kernel can take (`offload::Capture`);
//!   the body is compiled by `offload-lang` at its first launch with
//!   those types, and cached.
//! - `kernels! { ... }` holds a whole source module (kernels, functions,
//!   classes); it is compiled here, at compile time, so an error in it is
//!   a compile error of the Rust program.

use proc_macro::TokenStream;
use quote::quote;

/// (Expanded by `offload-macros`.)
#[proc_macro]
pub fn kernel(input: TokenStream) -> TokenStream {
    // The whole invocation's text and position, for the body's exact text
    // and for errors that point at the user's lines.
    let call = proc_macro::Span::call_site();
    let (call_text, call_line, call_col) = (call.source_text(), call.line(), call.column());
    // Within the front end's limits before syn recurses over it (nesting
    // past them would overflow the compiler's stack).
    if let Err(d) = offload_lang::check_limits("kernel!", &input.to_string()) {
        let msg = format!("kernel!: {}", d.0[0].detail());
        return quote! { ::core::compile_error!(#msg) }.into();
    }
    let closure: syn::ExprClosure = match syn::parse(input) {
        Ok(c) => c,
        Err(e) => {
            let msg =
                format!("kernel! takes a closure over the workitem index, `move |i| ...`: {e}");
            return quote! { ::core::compile_error!(#msg) }.into();
        }
    };
    // One index, or two or three over a 2-D or 3-D range (the source
    // kernel then takes them as a tuple, `offload_lang::ranges`).
    if !(1..=3).contains(&closure.inputs.len()) {
        return quote! {
            ::core::compile_error!("a kernel! closure takes the workitem index, `|i|` (an `i32`) or `|i: i64|`, or two or three indices over a 2-D or 3-D range, `|i, j|`")
        }
        .into();
    }
    let mut indices = Vec::new();
    for input in &closure.inputs {
        let one = match input {
            syn::Pat::Ident(p) => (p.ident.to_string(), "i32".to_string()),
            syn::Pat::Type(t) => match (&*t.pat, &*t.ty) {
                (syn::Pat::Ident(p), syn::Type::Path(ty))
                    if ty.path.is_ident("i32") || ty.path.is_ident("i64") =>
                {
                    (
                        p.ident.to_string(),
                        ty.path
                            .get_ident()
                            .map(|i| i.to_string())
                            .unwrap_or_default(),
                    )
                }
                _ => {
                    return quote! {
                        ::core::compile_error!("the workitem index is `i32` or `i64`: `|i: i64|`")
                    }
                    .into();
                }
            },
            _ => {
                return quote! {
                    ::core::compile_error!("the workitem index is a name: `|i|`")
                }
                .into();
            }
        };
        indices.push(one);
    }
    let (index, index_ty) = if indices.len() == 1 {
        indices.remove(0)
    } else {
        let names: Vec<&str> = indices.iter().map(|(n, _)| n.as_str()).collect();
        let tys: Vec<&str> = indices.iter().map(|(_, t)| t.as_str()).collect();
        (
            format!("({})", names.join(", ")),
            format!("({})", tys.join(", ")),
        )
    };
    // A reducing kernel's closure names its return type, `|i| -> f32 { ... }`.
    let returns = match &closure.output {
        syn::ReturnType::Default => String::new(),
        syn::ReturnType::Type(_, t) => quote!(#t).to_string(),
    };
    let captures = offload_lang::free_variables(&closure);
    let body = &closure.body;
    // The body as written, and where it starts; else as tokens print.
    let (text, line, col) = match call_text.as_deref().and_then(body_of) {
        Some((offset, text)) => {
            let before = &call_text.as_deref().unwrap_or("")[..offset];
            let nl = before.matches('\n').count();
            let col = match before.rfind('\n') {
                Some(at) => before[at + 1..].chars().count() + 1,
                None => call_col + before.chars().count(),
            };
            (text.to_string(), call_line + nl, col)
        }
        None => (quote!(#body).to_string(), call_line, call_col),
    };
    let line = line as u32;
    let col = col as u32;
    let call_shown = call_text.clone().unwrap_or_default();
    let (call_line, call_col) = (call_line as u32, call_col as u32);
    let names = captures.iter().map(String::as_str);
    // Each capture named where the body first uses it, so that rustc's
    // error for a name that is not in scope points at that use (at the
    // call site, it offered to replace the whole `kernel!(...)`).
    let body_tokens = quote!(#body);
    let idents = captures.iter().map(|c| {
        let span = first_use(body_tokens.clone(), c).unwrap_or_else(proc_macro2::Span::call_site);
        syn::Ident::new(c, span)
    });
    quote! {
        {
            static __OFFLOAD_SITE: ::offload::source::ClosureSite = ::offload::source::ClosureSite::new(
                #text,
                #call_shown,
                (#call_line, #call_col),
                ::core::file!(),
                #line,
                #col,
                #index,
                #index_ty,
                #returns,
                &[#(#names),*],
            );
            __OFFLOAD_SITE.bind(::std::vec![#(::offload::source::Capture::capture(&#idents)),*])
        }
    }
    .into()
}

/// The span of the first identifier `name` in `tokens`.
fn first_use(tokens: proc_macro2::TokenStream, name: &str) -> Option<proc_macro2::Span> {
    tokens.into_iter().find_map(|t| match t {
        proc_macro2::TokenTree::Ident(i) if i == name => Some(i.span()),
        proc_macro2::TokenTree::Group(g) => first_use(g.stream(), name),
        _ => None,
    })
}

/// The body of `kernel!(move |i| BODY)` (or `move |i| -> T { ... }`) in
/// the invocation's text: its byte offset and text.
fn body_of(call: &str) -> Option<(usize, &str)> {
    let first = call.find('|')?;
    let second = first + 1 + call[first + 1..].find('|')?;
    let end = call.rfind(')')?;
    let mut start = second + 1;
    // `|i| -> f32 { ... }`: the body is the block after the return type.
    if call.get(start..)?.trim_start().starts_with("->") {
        start += call[start..].find('{')?;
    }
    let raw = call.get(start..end)?;
    let lead = raw.len() - raw.trim_start().len();
    let body = raw.trim();
    let body = body.strip_suffix(',').unwrap_or(body).trim_end();
    Some((start + lead, body))
}

/// The span of the first token of `tokens` that starts at or after
/// `(line, column)` (both 1-based): where an error found in the tokens'
/// text at that position belongs.
fn token_at(tokens: TokenStream, at: (usize, usize)) -> Option<proc_macro::Span> {
    use proc_macro::TokenTree;
    tokens.into_iter().find_map(|t| {
        let span = match &t {
            TokenTree::Group(g) => g.span_open(),
            other => other.span(),
        };
        if (span.line(), span.column()) >= at {
            return Some(span);
        }
        match t {
            TokenTree::Group(g) => {
                // Inside the group, or at its closing delimiter.
                let close = g.span_close();
                token_at(g.stream(), at).or(((close.line(), close.column()) >= at).then_some(close))
            }
            _ => None,
        }
    })
}

/// (Expanded by `offload-macros`.)
#[proc_macro]
pub fn kernels(input: TokenStream) -> TokenStream {
    let call = proc_macro::Span::call_site();
    // The text between the braces, and the line and column (1-based) of
    // its first character in the Rust file.
    let (text, line, col) = match call.source_text() {
        Some(t) => match (t.find('{'), t.rfind('}')) {
            (Some(a), Some(b)) if a < b => {
                let before = &t[..=a];
                let line = call.line() + before.matches('\n').count();
                let col = match before.rfind('\n') {
                    Some(nl) => before[nl + 1..].chars().count() + 1,
                    None => call.column() + before.chars().count(),
                };
                (t[a + 1..b].to_string(), line, col)
            }
            _ => (input.to_string(), call.line(), call.column()),
        },
        None => (input.to_string(), call.line(), call.column()),
    };
    // Compiled now: an error in the kernels is an error of the program.
    // The front end parses the text with proc-macro2's own spans, whose
    // lines count from the text's start (the compiler's would all be the
    // invocation's line); each error is put on the token of the Rust
    // file at its line and column, where rustc shows it.
    proc_macro2::fallback::force();
    let checked = offload_lang::check_in_macro("kernels!", &text);
    proc_macro2::fallback::unforce();
    if let Err(d) = checked {
        let errors = d.0.iter().map(|d| {
            let at_line = line + d.span.line.saturating_sub(1) as usize;
            let at_col = if d.span.line <= 1 {
                col + d.span.col.saturating_sub(1) as usize
            } else {
                d.span.col as usize
            };
            let span = token_at(input.clone(), (at_line, at_col))
                .map_or_else(proc_macro2::Span::call_site, proc_macro2::Span::from);
            let msg = format!("kernels!: {}", d.detail());
            quote::quote_spanned! {span=> ::core::compile_error!(#msg);}
        });
        // A value of any type after them (`!`), so that rustc reports
        // nothing else about the invocation.
        return quote! { { #(#errors)* ::core::unreachable!() } }.into();
    }
    let line = call.line() as u32;
    quote! {
        {
            static __OFFLOAD_MODULE: ::offload::source::SourceModule =
                ::offload::source::SourceModule::new(#text, ::core::file!(), #line);
            &__OFFLOAD_MODULE
        }
    }
    .into()
}
