use super::*;
use proptest::prelude::*;

/// The tree's root computed straight from its definition.
fn by_definition(ty: Scalar, c: Combine, v: &[u64], lo: usize, size: usize) -> Option<u64> {
    if lo >= v.len() {
        return None;
    }
    if size == 1 {
        return Some(v[lo]);
    }
    let l = by_definition(ty, c, v, lo, size / 2);
    let r = by_definition(ty, c, v, lo + size / 2, size / 2);
    match (l, r) {
        (Some(a), Some(b)) => Some(c.apply(ty, a, b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// The tree's root as [`join`] gives it: a float sum that is NaN is the
/// canonical NaN ([`Combine::canonical`]).
fn root(ty: Scalar, c: Combine, v: &[u64]) -> u64 {
    let bits = by_definition(ty, c, v, 0, v.len().next_power_of_two()).unwrap_or(c.empty(ty));
    c.canonical(ty, bits)
}

fn f32s(v: &[f32]) -> Vec<u64> {
    v.iter().map(|x| u64::from(x.to_bits())).collect()
}

#[test]
fn six_values_join_as_the_docs_draw() {
    let v = f32s(&[1e8, 1.0, -1e8, 1.0, 0.5, 0.25]);
    let mut b = Builder::new(6, Scalar::F32, Combine::Sum);
    b.push_run(0, v.iter().copied());
    let nodes = b.finish();
    assert_eq!(nodes.len(), 1);
    let f = |x: u64| f32::from_bits(x as u32);
    let want = ((f(v[0]) + f(v[1])) + (f(v[2]) + f(v[3]))) + (f(v[4]) + f(v[5]));
    assert_eq!(f(nodes[0].value).to_bits(), want.to_bits());
    // Not what a left-to-right loop gives.
    let seq: f32 = v.iter().map(|&x| f(x)).sum();
    assert_ne!(seq.to_bits(), want.to_bits());
}

#[test]
fn an_empty_range_gives_the_combines_identity() {
    assert_eq!(join(0, Scalar::I64, Combine::Sum, Vec::new()), Ok(0));
    assert_eq!(
        join(0, Scalar::F64, Combine::Min, Vec::new()),
        Ok(f64::INFINITY.to_bits())
    );
    assert_eq!(
        join(0, Scalar::I32, Combine::Max, Vec::new()),
        Ok(i32::MIN as u32 as u64)
    );
}

#[test]
fn nodes_that_miss_or_repeat_a_workitem_are_refused() {
    let leaf = Node::leaf;
    let missing = join(3, Scalar::I64, Combine::Sum, vec![leaf(0, 1), leaf(2, 1)]);
    assert!(
        missing
            .unwrap_err()
            .contains("lack the workitem at position 1")
    );
    let twice = join(
        2,
        Scalar::I64,
        Combine::Sum,
        vec![leaf(0, 1), leaf(0, 1), leaf(1, 1)],
    );
    assert!(twice.unwrap_err().contains("count twice"));
    let past = join(
        2,
        Scalar::I64,
        Combine::Sum,
        vec![leaf(0, 1), leaf(1, 1), leaf(2, 1)],
    );
    assert!(past.unwrap_err().contains("past the range's end"));
    let short = join(3, Scalar::I64, Combine::Sum, vec![leaf(0, 1), leaf(1, 1)]);
    assert!(short.unwrap_err().contains("position 2"));
}

#[test]
fn min_and_max_order_signed_zeros_and_keep_the_first_nan() {
    let z = |x: f64| x.to_bits();
    let (m, p) = (z(-0.0), z(0.0));
    assert_eq!(Combine::Min.apply(Scalar::F64, p, m), m);
    assert_eq!(Combine::Min.apply(Scalar::F64, m, p), m);
    assert_eq!(Combine::Max.apply(Scalar::F64, m, p), p);
    assert_eq!(Combine::Max.apply(Scalar::F64, p, m), p);
    let nan1 = f64::from_bits(0x7ff8_0000_0000_0001);
    let nan2 = f64::from_bits(0x7ff8_0000_0000_0002);
    assert_eq!(Combine::Min.apply(Scalar::F64, z(1.0), z(nan1)), z(nan1));
    assert_eq!(Combine::Max.apply(Scalar::F64, z(nan1), z(nan2)), z(nan1));
    assert_eq!(
        Combine::Min.apply(Scalar::I32, (-3i32) as u32 as u64, 2),
        (-3i32) as u32 as u64
    );
    assert_eq!(
        Combine::Sum.apply(Scalar::I32, i32::MAX as u64, 1),
        i32::MIN as u32 as u64
    );
}

#[test]
fn a_float_sum_that_is_nan_is_the_same_nan_on_every_device() {
    let leaf = Node::leaf;
    // An operand's payload (what an x86 addition keeps) or a negative NaN
    // (what it makes of inf - inf) both become `NAN`.
    let nan1 = u64::from(f32::from_bits(0x7fc0_0001).to_bits());
    let sum = join(
        3,
        Scalar::F32,
        Combine::Sum,
        vec![
            leaf(0, nan1),
            leaf(1, u64::from(1f32.to_bits())),
            leaf(2, 0),
        ],
    );
    assert_eq!(sum, Ok(u64::from(f32::NAN.to_bits())));
    let (inf, ninf) = (f64::INFINITY.to_bits(), f64::NEG_INFINITY.to_bits());
    let sum = join(
        2,
        Scalar::F64,
        Combine::Sum,
        vec![leaf(0, inf), leaf(1, ninf)],
    );
    assert_eq!(sum, Ok(f64::NAN.to_bits()));
    // Min and max choose: the payload stays.
    let min = join(
        2,
        Scalar::F32,
        Combine::Min,
        vec![leaf(0, nan1), leaf(1, 0)],
    );
    assert_eq!(min, Ok(nan1));
}

/// `inf + -inf` inside the tree (x86 makes it a negative NaN): the root
/// and every partition give the canonical NaN (a CI failure of the
/// property below, kept as a plain case).
#[test]
fn a_sum_that_overflows_both_ways_is_the_canonical_nan() {
    let v = f32s(&[f32::MAX, f32::MAX, f32::MIN, f32::MIN]);
    let want = u64::from(f32::NAN.to_bits());
    assert_eq!(root(Scalar::F32, Combine::Sum, &v), want);
    for cuts in [vec![], vec![1], vec![2], vec![1, 3]] {
        assert_eq!(
            partitioned(4, &cuts, &[], Scalar::F32, Combine::Sum, &v),
            want
        );
    }
}

/// A partition of `0..n` into runs, each cut further by holes (leaves pushed
/// on their own, like deopted workitems), pushed by several builders in an
/// order that is not the range's.
fn partitioned(n: u64, cuts: &[u64], holes: &[u64], ty: Scalar, c: Combine, v: &[u64]) -> u64 {
    let mut bounds: Vec<u64> = cuts.iter().map(|x| x % (n + 1)).collect();
    bounds.extend([0, n]);
    bounds.sort_unstable();
    bounds.dedup();
    let holes: std::collections::BTreeSet<u64> = holes.iter().map(|h| h % n.max(1)).collect();
    let mut nodes = Vec::new();
    let mut replayed = Builder::new(n, ty, c);
    for (k, w) in bounds.windows(2).enumerate().rev() {
        let mut b = Builder::new(n, ty, c);
        // Runs between holes, pushed a leaf at a time or all at once.
        let mut run: Vec<u64> = Vec::new();
        let mut run_start = w[0];
        for p in w[0]..=w[1] {
            if p == w[1] || holes.contains(&p) {
                if k % 3 == 0 {
                    b.push_run(run_start, run.drain(..));
                } else if k % 3 == 1 && matches!(ty, Scalar::I32 | Scalar::F32) {
                    let mut narrow: Vec<u32> = run.drain(..).map(|v| v as u32).collect();
                    b.push_values32(run_start, &mut narrow);
                } else {
                    b.push_values(run_start, &mut run);
                    run.clear();
                }
                if p < w[1] {
                    replayed.push_leaf(p, v[p as usize]);
                }
                run_start = p + 1;
            } else {
                run.push(v[p as usize]);
            }
        }
        // Builders of odd-numbered runs hand nodes on at once, others keep
        // theirs (a worker that goes on to its next chunk).
        nodes.extend(b.finish());
        if k % 2 == 1 {
            nodes.reverse();
        }
    }
    nodes.extend(replayed.finish());
    join(n, ty, c, nodes).expect("the nodes tile the range")
}

fn scalar_values() -> impl Strategy<Value = (Scalar, Vec<u64>)> {
    prop_oneof![
        proptest::collection::vec(any::<f32>(), 0..300).prop_map(|v| (
            Scalar::F32,
            v.iter().map(|x| u64::from(x.to_bits())).collect()
        )),
        proptest::collection::vec(-1e6f64..1e6, 0..300)
            .prop_map(|v| (Scalar::F64, v.iter().map(|x| x.to_bits()).collect())),
        proptest::collection::vec(any::<i32>(), 0..300).prop_map(|v| (
            Scalar::I32,
            v.iter().map(|&x| u64::from(x as u32)).collect()
        )),
        proptest::collection::vec(any::<i64>(), 0..300)
            .prop_map(|v| (Scalar::I64, v.iter().map(|&x| x as u64).collect())),
    ]
}

proptest! {
    /// Any partition of the range, any holes, any order of the nodes: the
    /// same bits as the tree's definition.
    #[test]
    fn every_partition_gives_the_trees_root(
        (ty, v) in scalar_values(),
        cuts in proptest::collection::vec(any::<u64>(), 0..12),
        holes in proptest::collection::vec(any::<u64>(), 0..12),
        c in prop_oneof![Just(Combine::Sum), Just(Combine::Min), Just(Combine::Max)],
    ) {
        let n = v.len() as u64;
        let want = root(ty, c, &v);
        prop_assert_eq!(partitioned(n, &cuts, &holes, ty, c, &v), want);
    }

    /// Integer sums are exact whatever the tree: the wrapping sum.
    #[test]
    fn integer_sums_are_the_wrapping_sum(v in proptest::collection::vec(any::<i64>(), 0..200)) {
        let raw: Vec<u64> = v.iter().map(|&x| x as u64).collect();
        let want = v.iter().fold(0i64, |a, &b| a.wrapping_add(b));
        prop_assert_eq!(root(Scalar::I64, Combine::Sum, &raw) as i64, want);
    }
}
