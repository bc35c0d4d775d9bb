//! The small parsers of REPL arguments: numbers, sizes, durations, ranges,
//! array heads and indices, literals by element type.

use super::*;

pub(super) fn one<'a>(words: &[&'a str], usage: &str) -> Result<&'a str> {
    match words {
        [w] => Ok(w),
        _ => Err(ReplError::Entry(format!("usage: {usage}"))),
    }
}

pub(super) fn parse_u64(s: &str) -> Result<u64> {
    s.replace('_', "")
        .parse()
        .map_err(|_| ReplError::Entry(format!("`{s}` is not a non-negative integer")))
}

pub(super) fn parse_f(s: &str) -> Result<f64> {
    s.parse()
        .map_err(|_| ReplError::Entry(format!("`{s}` is not a number")))
}

pub fn parse_duration(s: &str) -> Result<Duration> {
    let (num, unit) = s
        .find(|c: char| c.is_alphabetic())
        .map_or((s, "ms"), |i| s.split_at(i));
    let x: f64 = num.parse().map_err(|_| {
        ReplError::Entry(format!("`{s}` is not a duration (like 20ms, 1.5s, 300us)"))
    })?;
    let secs = match unit {
        "s" => x,
        "ms" => x / 1e3,
        "us" | "µs" => x / 1e6,
        _ => bail!("`{s}`: the unit is s, ms or us"),
    };
    if !(0.0..=3600.0).contains(&secs) {
        bail!("`{s}` is not a delay between 0 and an hour");
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Bytes, with an optional K, M or G suffix (powers of 1024): `4096`,
/// `64K`, `64M`, `1G`, `1_000`.
pub(super) fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.replace('_', "");
    let (digits, shift) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 10),
        (i, 'm' | 'M') => (&s[..i], 20),
        (i, 'g' | 'G') => (&s[..i], 30),
        _ => (&s[..], 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// `A..B`, or `N` for `0..N`; either end may be a variable.
pub(super) fn parse_range(s: &str, vars: &BTreeMap<String, Var>) -> Result<std::ops::Range<i64>> {
    let end = |x: &str| -> Result<i64> {
        match vars.get(x) {
            Some(Var::Scalar(Arg::I32(n))) => Ok(i64::from(*n)),
            Some(Var::Scalar(Arg::I64(n))) => Ok(*n),
            Some(Var::I32(a)) => Ok(a.len() as i64),
            Some(Var::I64(a)) => Ok(a.len() as i64),
            Some(Var::F32(a)) => Ok(a.len() as i64),
            Some(Var::F64(a)) => Ok(a.len() as i64),
            Some(Var::Refs(a)) => Ok(a.len() as i64),
            _ => x
                .replace('_', "")
                .parse()
                .map_err(|_| ReplError::Entry(format!("`{x}` is not a range end (a number, or a variable: an integer or an array, meaning its length)"))),
        }
    };
    match s.split_once("..") {
        Some((a, b)) => Ok(end(a)?..end(b)?),
        None => Ok(0..end(s)?),
    }
}

/// The range of `run`'s words after the kernel (a tuple's words joined:
/// `(0..h,` `0..w)`), and the words after it.
pub(super) fn split_range<'a, 'w>(words: &'a [&'w str]) -> Option<(String, &'a [&'w str])> {
    let first = words.first()?;
    if !first.starts_with('(') {
        return Some((first.to_string(), &words[1..]));
    }
    let end = words.iter().position(|w| w.ends_with(')'))?;
    Some((words[..=end].join(" "), &words[end + 1..]))
}

/// `A..B` or `N` (see [`parse_range`]), or a tuple of two or three for a
/// 2-D or 3-D range, `(0..h, 0..w)`.
pub(super) fn parse_launch_range(
    s: &str,
    vars: &BTreeMap<String, Var>,
) -> Result<offload::LaunchRange> {
    let Some(inner) = s.strip_prefix('(').and_then(|t| t.strip_suffix(')')) else {
        return Ok(parse_range(s, vars)?.into());
    };
    let parts: Vec<std::ops::Range<i64>> = inner
        .split(',')
        .map(|p| parse_range(p.trim(), vars))
        .collect::<Result<_>>()?;
    match <[_; 2]>::try_from(parts.clone()) {
        Ok([a, b]) => Ok((a, b).into()),
        Err(_) => match <[_; 3]>::try_from(parts) {
            Ok([a, b, c]) => Ok((a, b, c).into()),
            Err(p) => Err(ReplError::Entry(format!(
                "`{s}`: a range is `lo..hi`, or a tuple of two or three (`(0..h, 0..w)`), not {} ranges",
                p.len()
            ))),
        },
    }
}

/// `i32[N]`, `Shape[N]`: the element type and the length.
pub(super) fn array_head(s: &str) -> Option<(&str, &str)> {
    let (elem, rest) = s.split_once('[')?;
    let len = rest.strip_suffix(']')?;
    (!elem.is_empty() && !len.is_empty()).then_some((elem, len))
}

/// `name[inside]`.
pub(super) fn index_of(s: &str) -> Result<(&str, &str)> {
    let (name, rest) = s
        .split_once('[')
        .ok_or_else(|| ReplError::Entry(format!("`{s}` is not NAME[INDEX]")))?;
    let inside = rest
        .strip_suffix(']')
        .ok_or_else(|| ReplError::Entry(format!("`{s}`: missing `]`")))?;
    Ok((name.trim(), inside.trim()))
}

pub(super) trait FromArg: Sized {
    fn from_arg(a: Arg) -> Option<Self>;
}
impl FromArg for i32 {
    fn from_arg(a: Arg) -> Option<Self> {
        if let Arg::I32(x) = a { Some(x) } else { None }
    }
}
impl FromArg for i64 {
    fn from_arg(a: Arg) -> Option<Self> {
        if let Arg::I64(x) = a { Some(x) } else { None }
    }
}
impl FromArg for f32 {
    fn from_arg(a: Arg) -> Option<Self> {
        if let Arg::F32(x) = a { Some(x) } else { None }
    }
}
impl FromArg for f64 {
    fn from_arg(a: Arg) -> Option<Self> {
        if let Arg::F64(x) = a { Some(x) } else { None }
    }
}

pub(super) fn num_of<T: FromArg>(a: Arg) -> Result<T> {
    T::from_arg(a.clone()).ok_or_else(|| {
        ReplError::Entry(format!(
            "{} {} does not fit the element type",
            arg_type(&a),
            arg_text(&a)
        ))
    })
}
