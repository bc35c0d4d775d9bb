//! "Did you mean": the nearest of the names a session knows (commands,
//! settings, kernels, variables, locals, labels) to one it does not, by
//! edit distance (`offload::ir::nearest`, through strsim).

/// `; did you mean `NAME`?` for the candidate nearest to `word`, or nothing
/// when none is near (at most a third of the word's length away, and at
/// least one edit for short words).
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    nearest(word, candidates).map_or(String::new(), |c| format!("; did you mean `{c}`?"))
}

pub use offload::ir::nearest;

/// `a` or `an` for a type name as the text form writes it (`an i32`, `an
/// f64[]`, `a Node`, `an Item`).
pub fn article(name: &str) -> &'static str {
    let mut cs = name.chars();
    match (cs.next(), cs.next()) {
        (Some('f' | 'i'), Some(d)) if d.is_ascii_digit() => "an",
        (Some(c), _) if "aeiouAEIOU".contains(c) => "an",
        _ => "a",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_the_nearest_name_or_nothing() {
        let names = ["saxpy", "mandelbrot", "matmul", ":deopts", ":heap"];
        assert_eq!(nearest("saxpi", names), Some("saxpy"));
        assert_eq!(nearest("mandlebrot", names), Some("mandelbrot"));
        assert_eq!(nearest(":deopt", names), Some(":deopts"));
        assert_eq!(nearest("zz", names), None);
        assert_eq!(nearest("3", ["a", "b"]), None, "one character is no hint");
        assert_eq!(nearest("saxpy", names), None, "not itself");
        assert_eq!(did_you_mean(":hep", names), "; did you mean `:heap`?");
        assert_eq!(did_you_mean("qqqq", names), "");
    }

    #[test]
    fn articles() {
        assert_eq!(article("i32"), "an");
        assert_eq!(article("f64[]"), "an");
        assert_eq!(article("Node"), "a");
        assert_eq!(article("Item"), "an");
        assert_eq!(article("ref"), "a");
    }
}
