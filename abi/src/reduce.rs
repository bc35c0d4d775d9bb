//! The order in which a reduction combines its workitems' values: one
//! binary tree over the launch's range, the same for every device, every
//! partition of the range and every pattern of deopts.
//!
//! A reducing kernel returns a value per workitem; the launch combines them
//! with an associative operation ([`Combine`]). Floating-point addition is
//! not associative, so the *order* of the combines is part of the result.
//! offload fixes it once: the workitem at position `p` of an `n`-workitem
//! range (its number minus the range's start) is leaf `p` of a perfect
//! binary tree over the positions, and each inner node combines its left
//! subtree's value with its right's. A node whose right half lies wholly at
//! or past `n` takes its left half's value unchanged (so the tree needs no
//! identity element); the root is the result.
//!
//! ```text
//!   n = 6:            root = (v0⊕v1 ⊕ v2⊕v3) ⊕ (v4⊕v5)
//!              (v0⊕v1)⊕(v2⊕v3)          (v4⊕v5)        ← the right half
//!           v0⊕v1     v2⊕v3        v4⊕v5                  [8, 12) is empty
//!          v0  v1    v2  v3       v4  v5
//! ```
//!
//! Every executor computes *complete nodes* of this tree — the subtree over
//! an aligned block of positions, `2^level` of them starting at a multiple
//! of `2^level`, clipped to `n` — and hands them on as [`Node`]s. A run of
//! consecutive workitems becomes the few maximal nodes that tile it
//! ([`Builder`]: a stack that joins two siblings as soon as both are there,
//! at most one node per level pending); a deopted workitem's value comes
//! later as a leaf. The host joins every node of the launch with the same
//! builder after sorting them by position, which rebuilds exactly the root
//! the whole tree would have given: the result depends on the values and
//! the range's length only — not on the device, the slot count, the chunks
//! the workers claimed, or which workitems deopted or ran on the host.
//!
//! This is the same tree a GPU block builds with `shfl.sync.down` at
//! offsets 1, 2, 4, … (lane `i` joins lane `i + 2^k` when `i` is a multiple
//! of `2^(k+1)`): pairwise summation, whose rounding error grows with
//! `log n` rather than `n`.

/// The value type of a reduction (a kernel's return type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scalar {
    /// 32-bit integers (combined with wrapping arithmetic).
    I32,
    /// 64-bit integers (combined with wrapping arithmetic).
    I64,
    /// 32-bit IEEE floats.
    F32,
    /// 64-bit IEEE floats.
    F64,
}

impl Scalar {
    /// The type's name in bytecode and source (`i32`, `f64`, …).
    pub fn name(self) -> &'static str {
        match self {
            Scalar::I32 => "i32",
            Scalar::I64 => "i64",
            Scalar::F32 => "f32",
            Scalar::F64 => "f64",
        }
    }
}

/// How a reduction combines two values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Combine {
    /// Addition (integers wrap; floats round to nearest, in the tree's
    /// order). An empty range gives 0.
    Sum,
    /// The smaller value. Floats: a NaN wins over any number (the leftmost
    /// NaN of the tree's order), and `-0.0` is smaller than `+0.0`. An
    /// empty range gives the type's largest value (`+inf` for floats).
    Min,
    /// The larger value, with the same rules as [`Combine::Min`] mirrored
    /// (`+0.0` is larger than `-0.0`). An empty range gives the type's
    /// smallest value (`-inf` for floats).
    Max,
}

impl Combine {
    /// Every combine, in the order [`Combine::name`] lists them.
    pub const ALL: [Combine; 3] = [Combine::Sum, Combine::Min, Combine::Max];

    /// The combine's name (`sum`, `min`, `max`), as the REPL spells it.
    pub fn name(self) -> &'static str {
        match self {
            Combine::Sum => "sum",
            Combine::Min => "min",
            Combine::Max => "max",
        }
    }

    /// The combine named `s`, if any.
    pub fn parse(s: &str) -> Option<Combine> {
        Combine::ALL.into_iter().find(|c| c.name() == s)
    }

    /// The result of reducing no values (raw bits of a `ty`).
    pub fn empty(self, ty: Scalar) -> u64 {
        match (self, ty) {
            (Combine::Sum, Scalar::F32) => u64::from(0f32.to_bits()),
            (Combine::Sum, Scalar::F64) => 0f64.to_bits(),
            (Combine::Sum, _) => 0,
            (Combine::Min, Scalar::I32) => i32::MAX as u32 as u64,
            (Combine::Min, Scalar::I64) => i64::MAX as u64,
            (Combine::Min, Scalar::F32) => u64::from(f32::INFINITY.to_bits()),
            (Combine::Min, Scalar::F64) => f64::INFINITY.to_bits(),
            (Combine::Max, Scalar::I32) => i32::MIN as u32 as u64,
            (Combine::Max, Scalar::I64) => i64::MIN as u64,
            (Combine::Max, Scalar::F32) => u64::from(f32::NEG_INFINITY.to_bits()),
            (Combine::Max, Scalar::F64) => f64::NEG_INFINITY.to_bits(),
        }
    }

    /// A result as every device gives it: a float sum that is NaN is
    /// `f32::NAN` or `f64::NAN` (processors differ in which NaN an
    /// addition gives — the CPU keeps an operand's payload, the GPU
    /// gives its own — and a NaN in a sum makes the sum NaN whatever the
    /// order); everything else unchanged (`min` and `max` only choose, so
    /// the NaN they keep is the leftmost value's, on every device).
    pub fn canonical(self, ty: Scalar, bits: u64) -> u64 {
        match (self, ty) {
            (Combine::Sum, Scalar::F32) if f32::from_bits(bits as u32).is_nan() => {
                u64::from(f32::NAN.to_bits())
            }
            (Combine::Sum, Scalar::F64) if f64::from_bits(bits).is_nan() => f64::NAN.to_bits(),
            _ => bits,
        }
    }

    /// The combine's number in a GPU launch's context
    /// ([`crate::gpu::DeviceCtx::combine`]): 0, 1, 2 for sum, min, max.
    pub fn code(self) -> u64 {
        match self {
            Combine::Sum => 0,
            Combine::Min => 1,
            Combine::Max => 2,
        }
    }

    /// `a ⊕ b` on the raw bits of two `ty` values (an `i32` or `f32` in the
    /// low 32 bits, the high bits 0), `a` the left subtree's value.
    pub fn apply(self, ty: Scalar, a: u64, b: u64) -> u64 {
        match ty {
            Scalar::I32 => {
                let (x, y) = (a as u32 as i32, b as u32 as i32);
                let r = match self {
                    Combine::Sum => x.wrapping_add(y),
                    Combine::Min => x.min(y),
                    Combine::Max => x.max(y),
                };
                u64::from(r as u32)
            }
            Scalar::I64 => {
                let (x, y) = (a as i64, b as i64);
                (match self {
                    Combine::Sum => x.wrapping_add(y),
                    Combine::Min => x.min(y),
                    Combine::Max => x.max(y),
                }) as u64
            }
            Scalar::F32 => {
                let (x, y) = (f32::from_bits(a as u32), f32::from_bits(b as u32));
                let r = match self {
                    Combine::Sum => x + y,
                    Combine::Min => pick(x, y, x.is_nan(), y.is_nan(), less32(x, y)),
                    Combine::Max => pick(x, y, x.is_nan(), y.is_nan(), less32(y, x)),
                };
                u64::from(r.to_bits())
            }
            Scalar::F64 => {
                let (x, y) = (f64::from_bits(a), f64::from_bits(b));
                let r = match self {
                    Combine::Sum => x + y,
                    Combine::Min => pick(x, y, x.is_nan(), y.is_nan(), less64(x, y)),
                    Combine::Max => pick(x, y, x.is_nan(), y.is_nan(), less64(y, x)),
                };
                r.to_bits()
            }
        }
    }
}

/// `x` if it is a NaN, else `y` if it is, else `x` when `x_first`, else `y`.
fn pick<T>(x: T, y: T, x_nan: bool, y_nan: bool, x_first: bool) -> T {
    if x_nan || (!y_nan && x_first) { x } else { y }
}

/// `x < y`, or `x` is `-0.0` and `y` is `+0.0`, or they are equal (ties
/// keep the left value).
fn less32(x: f32, y: f32) -> bool {
    x < y || (x == y && (x.is_sign_negative() || !y.is_sign_negative()))
}

/// [`less32`] for `f64`.
fn less64(x: f64, y: f64) -> bool {
    x < y || (x == y && (x.is_sign_negative() || !y.is_sign_negative()))
}

/// A complete node of the tree: the combined value of positions
/// `[index << level, (index + 1) << level)`, clipped to the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    /// The node's height (0: a leaf, one workitem).
    pub level: u32,
    /// Its index among the nodes of its level.
    pub index: u64,
    /// The combined value's raw bits.
    pub value: u64,
}

impl Node {
    /// The leaf of the workitem at `position`.
    pub fn leaf(position: u64, value: u64) -> Node {
        Node {
            level: 0,
            index: position,
            value,
        }
    }

    /// The first position it covers.
    pub fn start(&self) -> u64 {
        self.index << self.level
    }

    /// One past the last position it covers, before clipping to the range.
    fn end_unclipped(&self) -> u128 {
        u128::from(self.index + 1) << self.level
    }
}

/// Joins consecutive nodes of one range into the tree's maximal nodes: push
/// runs of leaves or nodes in position order; [`Builder::finish`] gives the
/// complete nodes that tile what was pushed (one, the root, when the whole
/// range was).
#[derive(Clone, Debug)]
pub struct Builder {
    /// The range's length `n`.
    len: u64,
    ty: Scalar,
    combine: Combine,
    /// Pending nodes, left to right, each waiting for its right sibling.
    stack: Vec<Node>,
    /// Complete nodes already given up on: a run that did not continue.
    done: Vec<Node>,
    /// The position the next node must start at to join the stack.
    next: u64,
}

impl Builder {
    /// A builder for a range of `len` workitems whose values are `ty`s.
    pub fn new(len: u64, ty: Scalar, combine: Combine) -> Builder {
        Builder {
            len,
            ty,
            combine,
            stack: Vec::new(),
            done: Vec::new(),
            next: 0,
        }
    }

    /// The values' type.
    pub fn ty(&self) -> Scalar {
        self.ty
    }

    /// Add the value of the workitem at `position`.
    pub fn push_leaf(&mut self, position: u64, value: u64) {
        self.push(Node::leaf(position, value));
    }

    /// Add the values of the workitems at `first`, `first + 1`, … in turn.
    pub fn push_run(&mut self, first: u64, values: impl IntoIterator<Item = u64>) {
        for (p, v) in (first..).zip(values) {
            self.push_leaf(p, v);
        }
    }

    /// Add the values of the workitems at `first`, `first + 1`, … — as
    /// [`Builder::push_run`], but each aligned block of the run is combined
    /// in one pass over the values, level by level (the inner loops are
    /// specialized per type and combine; `values` is overwritten).
    pub fn push_values(&mut self, first: u64, values: &mut [u64]) {
        let (ty, c) = (self.ty, self.combine);
        self.push_blocks(first, values, |b| combine_block(ty, c, b));
    }

    /// [`Builder::push_values`] for a 32-bit type (`i32`, `f32`), each
    /// value in 4 bytes.
    pub fn push_values32(&mut self, first: u64, values: &mut [u32]) {
        let (ty, c) = (self.ty, self.combine);
        self.push_blocks(first, values, |b| combine_block32(ty, c, b));
    }

    /// Cut the run of `values` from position `first` into the largest
    /// aligned blocks and push each one's root, from `root`.
    fn push_blocks<T>(&mut self, first: u64, values: &mut [T], root: impl Fn(&mut [T]) -> u64) {
        let (mut p, mut rest) = (first, values);
        while !rest.is_empty() {
            // The largest aligned block that starts at `p` and fits.
            let align = if p == 0 { 63 } else { p.trailing_zeros() };
            let fits = 63 - (rest.len() as u64).leading_zeros();
            let level = align.min(fits);
            let (block, tail) = rest.split_at_mut(1 << level);
            let value = root(block);
            self.push(Node {
                level,
                index: p >> level,
                value,
            });
            p += 1 << level;
            rest = tail;
        }
    }

    /// Add a complete node. A node that does not start where the last one
    /// ended begins a new run: what was pending is given up as complete
    /// nodes (joined later, at the host).
    ///
    /// # Panics
    ///
    /// If the node lies outside the range (a caller's bug, not input).
    pub fn push(&mut self, node: Node) {
        assert!(
            node.start() < self.len,
            "a reduction node past the range's end"
        );
        if node.start() != self.next {
            self.done.append(&mut self.stack);
        }
        self.next = node.end_unclipped().min(u128::from(self.len)) as u64;
        let mut node = node;
        loop {
            // A left child whose right sibling would start past the end is
            // its parent already.
            // (Index 0 is then the root.)
            while node.index & 1 == 0
                && node.index != 0
                && node.end_unclipped() >= u128::from(self.len)
            {
                node.level += 1;
                node.index >>= 1;
            }
            match self.stack.last() {
                Some(top)
                    if node.index & 1 == 1
                        && top.level == node.level
                        && top.index == node.index - 1 =>
                {
                    let value = self.combine.apply(self.ty, top.value, node.value);
                    self.stack.pop();
                    node = Node {
                        level: node.level + 1,
                        index: node.index >> 1,
                        value,
                    };
                }
                _ => break,
            }
        }
        self.stack.push(node);
    }

    /// The complete nodes of everything pushed, in position order.
    pub fn finish(mut self) -> Vec<Node> {
        self.done.append(&mut self.stack);
        self.done
    }
}

/// The tree over `block` (a power of two of values), combined level by
/// level in place: its root.
fn levels<T: Copy>(block: &mut [T], f: impl Fn(T, T) -> T) -> T {
    let mut len = block.len();
    while len > 1 {
        len /= 2;
        for i in 0..len {
            block[i] = f(block[2 * i], block[2 * i + 1]);
        }
    }
    block[0]
}

/// [`levels`] over raw 64-bit words of `ty`s (the inner loops specialized
/// per type and combine).
fn combine_block(ty: Scalar, c: Combine, block: &mut [u64]) -> u64 {
    match (ty, c) {
        (Scalar::F64, Combine::Sum) => levels(block, |a, b| {
            (f64::from_bits(a) + f64::from_bits(b)).to_bits()
        }),
        (Scalar::I64, Combine::Sum) => {
            levels(block, |a, b| (a as i64).wrapping_add(b as i64) as u64)
        }
        (Scalar::I32 | Scalar::F32, _) => {
            let mut narrow: Vec<u32> = block.iter().map(|&v| v as u32).collect();
            combine_block32(ty, c, &mut narrow)
        }
        _ => levels(block, |a, b| c.apply(ty, a, b)),
    }
}

/// [`levels`] over the 4-byte values of a 32-bit `ty`.
fn combine_block32(ty: Scalar, c: Combine, block: &mut [u32]) -> u64 {
    u64::from(match (ty, c) {
        // The hot case (a float dot product), which the compiler vectorizes.
        (Scalar::F32, Combine::Sum) => levels(block, |a, b| {
            (f32::from_bits(a) + f32::from_bits(b)).to_bits()
        }),
        (Scalar::I32, Combine::Sum) => {
            levels(block, |a, b| (a as i32).wrapping_add(b as i32) as u32)
        }
        _ => levels(block, |a, b| c.apply(ty, u64::from(a), u64::from(b)) as u32),
    })
}

/// The result of a whole range from the complete nodes every executor gave
/// (in any order): the root of the tree, or why the nodes do not tile the
/// range exactly once (a runtime bug the caller reports).
pub fn join(len: u64, ty: Scalar, combine: Combine, mut nodes: Vec<Node>) -> Result<u64, String> {
    if len == 0 {
        return if nodes.is_empty() {
            Ok(combine.empty(ty))
        } else {
            Err("values for an empty range".into())
        };
    }
    nodes.sort_unstable_by_key(|n| n.start());
    let mut b = Builder::new(len, ty, combine);
    let mut covered = 0u64;
    for n in nodes {
        if n.start() >= len {
            return Err(format!(
                "a value at position {} is past the range's end",
                n.start()
            ));
        }
        if n.start() != covered {
            return Err(format!(
                "the values {} position {covered}",
                if n.start() < covered {
                    "count twice the workitem at"
                } else {
                    "lack the workitem at"
                }
            ));
        }
        covered = n.end_unclipped().min(u128::from(len)) as u64;
        b.push(n);
    }
    if covered != len {
        return Err(format!(
            "the values lack the workitem at position {covered}"
        ));
    }
    match b.finish().as_slice() {
        [root] => Ok(combine.canonical(ty, root.value)),
        _ => Err("the values do not join into one tree".into()),
    }
}

#[cfg(test)]
mod tests;
