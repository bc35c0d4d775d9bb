//! Allocation in compiled code: the inline TLAB fast path, the designated
//! refiller slow path, every allocation policy, and injected refill
//! failures — with exact results and a heap that still parses.

use offload::AllocPolicy;
use offload::deopt::Reason;
use offload::{Device, Runtime, par_offload};

/// Each workitem builds a list of `n` nodes, each with a fresh array, then
/// walks it: out[i] = sum over k < n of (i + k) + k = n*i + n*(n-1).
pub const LIST: &str = "
class Node {
    field val: i64
    field next: Node
    field data: i32[]
}

kernel build(i: i64, n: i32, out: i64[]) {
    local k: i32
    local head: Node
    local node: Node
    local arr: i32[]
    local s: i64
    ref.null
    store head
    i64.const 0
    store s
    i32.const 0
    store k
  loop:
    load k
    load n
    i32.ge
    br_if walk
    new Node
    store node
    load node
    load i
    load k
    i32.to_i64
    i64.add
    putfield Node.val
    load node
    load head
    putfield Node.next
    load k
    i32.const 1
    i32.add
    newarray i32
    store arr
    load arr
    load k
    load k
    i32.astore
    load node
    load arr
    putfield Node.data
    load node
    store head
    inc k 1
    br loop
  walk:
    load head
    br_null end
    load s
    load head
    getfield Node.val
    i64.add
    load head
    getfield Node.data
    dup
    array.len
    i32.const 1
    i32.sub
    i32.aload
    i32.to_i64
    i64.add
    store s
    load head
    getfield Node.next
    store head
    br walk
  end:
    load out
    load i
    i64.to_i32
    load s
    i64.astore
    ret
}
";

fn run(b: offload::RuntimeBuilder, items: usize, n: i32) -> offload::LaunchReport {
    let rt = b.build().unwrap();
    let m = rt.load("list.obc", LIST).unwrap();
    let out = rt.new_array::<i64>(items).unwrap();
    let r = par_offload(
        0..items as i64,
        m.closure("build", [n.into(), (&out).into()]).unwrap(),
    )
    .unwrap();
    let got = rt.read(&out).unwrap();
    let n64 = i64::from(n);
    let want: Vec<i64> = (0..items as i64)
        .map(|i| n64 * i + n64 * (n64 - 1))
        .collect();
    assert_eq!(got, want, "{r}");
    assert!(r.fallback.is_none(), "{:?}", r.fallback);
    let stats = rt.verify_heap(&[&m]).unwrap();
    // Exactly the objects the workitems made (a failed or abandoned
    // compiled allocation leaves a filler, never a second object).
    let made = (items * n as usize) as u64;
    assert_eq!((stats.objects, stats.arrays), (made, made + 1), "{stats:?}");
    r
}

/// The CPU device, keeping every launch's objects so that the tests can
/// count them in the heap.
fn cpu() -> offload::RuntimeBuilder {
    Runtime::builder()
        .workers(2)
        .device(Device::Cpu)
        .tlab_bytes(512)
        .reclaim(false)
}

#[test]
fn compiled_allocation_under_every_policy_is_exact_and_parses() {
    for (policy, buffers) in [
        (AllocPolicy::SharedTlab { group: 2 }, true),
        (AllocPolicy::SharedTlab { group: 2 }, false),
        (AllocPolicy::SharedTlab { group: 1 }, true),
        (AllocPolicy::FailOnOverflow { group: 2 }, true),
        (AllocPolicy::FailOnOverflow { group: 2 }, false),
        (AllocPolicy::PrivateTlab, true),
        (AllocPolicy::EdenCas, true),
    ] {
        let r = run(cpu().alloc_policy(policy).alloc_buffers(buffers), 3000, 12);
        assert!(r.on_device > 0, "{policy:?}: {r}");
        // Workers of a group bump buffers of their own, taken from the
        // group's TLAB (see `offload_heap::alloc`).
        let grouped = matches!(
            policy,
            AllocPolicy::SharedTlab { group: 2 } | AllocPolicy::FailOnOverflow { group: 2 }
        );
        assert_eq!(
            r.alloc.buffer_refills > 0,
            grouped && buffers,
            "{policy:?}: {r}"
        );
        if policy != AllocPolicy::EdenCas {
            assert!(r.alloc.refills > 100, "{policy:?}: {r}");
        } else {
            assert!(r.alloc.direct > 0, "{policy:?}: {r}");
        }
        // Only the overflow-failing policy may deopt (an overflowing
        // allocator that is not the refiller gives up).
        if !matches!(policy, AllocPolicy::FailOnOverflow { .. }) {
            assert_eq!(r.replayed, 0, "{policy:?}: {r}");
        }
    }
}

#[test]
fn injected_refill_failures_deopt_and_replay_exactly_once() {
    for (first, every) in [(1, 0), (3, 0), (2, 5), (1, 1)] {
        let r = run(cpu().fail_refills(first, every).deopt_records(2), 2000, 9);
        let alloc_deopts: u64 = r
            .deopts
            .iter()
            .filter(|((_, why), _)| *why == Reason::AllocationFailure)
            .map(|(_, n)| n)
            .sum();
        assert!(alloc_deopts >= 1, "refill {first}/{every}: {r}");
        assert_eq!(r.replayed, alloc_deopts, "{r}");
    }
    // The interpreter device retries instead.
    run(
        Runtime::builder()
            .workers(2)
            .device(Device::Interpreter)
            .tlab_bytes(512)
            .fail_refills(1, 1)
            .reclaim(false),
        500,
        9,
    );
}

#[test]
fn large_arrays_skip_the_fast_path_and_exhaustion_is_an_exception() {
    // Arrays of 1000 i32 are larger than a quarter TLAB: straight from eden.
    let rt = cpu().build().unwrap();
    let m = rt
        .load(
            "big.obc",
            "kernel big(i: i64, out: i32[]) {\n    load out\n    load i\n    i64.to_i32\n    i32.const 1000\n    newarray i32\n    array.len\n    i32.astore\n    ret\n}\n",
        )
        .unwrap();
    let out = rt.new_array::<i32>(64).unwrap();
    let r = par_offload(0..64, m.closure("big", [(&out).into()]).unwrap()).unwrap();
    assert_eq!(rt.read(&out).unwrap(), vec![1000; 64]);
    assert!(r.fallback.is_none() && r.alloc.direct >= 64, "{r}");

    // A heap too small for the launch's garbage: the compiled allocation
    // fails, the workitem deopts, and the interpreter that replays it
    // collects; the launch completes with the exact answer.
    let rt = cpu()
        .initial_heap(1 << 20)
        .max_heap(1 << 20)
        .build()
        .unwrap();
    let m = rt.load("list.obc", LIST).unwrap();
    let out = rt.new_array::<i64>(4000).unwrap();
    let r = par_offload(
        0..4000,
        m.closure("build", [64.into(), (&out).into()]).unwrap(),
    )
    .unwrap();
    let want: Vec<i64> = (0..4000).map(|i| 64 * i + 64 * 63).collect();
    assert_eq!(rt.read(&out).unwrap(), want);
    assert!(
        r.gc.collections > 0
            && r.deopts
                .keys()
                .any(|&(_, why)| why == Reason::AllocationFailure),
        "{r}"
    );
    // Live data larger than the heap: OutOfMemory, for each workitem
    // that cannot allocate.
    let keep = "class Node {\n    field next: Node\n}\n\nkernel keep(i: i64, out: Node[]) {\n    load out\n    load i\n    i64.to_i32\n    new Node\n    ref.astore\n    ret\n}\n";
    let m = rt.load("keep.obc", keep).unwrap();
    let all = m.new_ref_array("Node", 100_000).unwrap();
    match par_offload(0..100_000, m.closure("keep", [(&all).into()]).unwrap()) {
        Err(offload::OffloadError::Exceptions(e)) => {
            assert_eq!(e.first.kind, offload::ir::ExceptionKind::OutOfMemory);
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
}

#[test]
fn negative_lengths_deopt_and_throw_as_on_the_interpreter() {
    let src = "kernel neg(i: i64, out: i32[]) {\n    load i\n    i64.to_i32\n    i32.const 5\n    i32.sub\n    newarray f64\n    array.len\n    pop\n    load out\n    load i\n    i64.to_i32\n    i32.const 1\n    i32.astore\n    ret\n}\n";
    let rt = cpu().build().unwrap();
    let m = rt.load("neg.obc", src).unwrap();
    let out = rt.new_array::<i32>(10).unwrap();
    match par_offload(0..10, m.closure("neg", [(&out).into()]).unwrap()) {
        Err(offload::OffloadError::Exceptions(e)) => {
            assert_eq!(e.count, 5);
            assert_eq!(e.first.kind, offload::ir::ExceptionKind::NegativeArraySize);
            assert!(e.report.fallback.is_none());
            assert!(
                e.report
                    .deopts
                    .keys()
                    .any(|&(_, why)| why == Reason::NegativeSize)
            );
        }
        other => panic!("expected exceptions, got {other:?}"),
    }
    assert_eq!(rt.read(&out).unwrap(), [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]);
}

#[test]
fn safepoints_during_compiled_allocation_lose_nothing() {
    // No loops: the only polls are between workitems and in the allocation
    // slow path, which every allocation takes under `eden-cas`.
    let src = "kernel one(i: i64, out: i32[]) {\n    load out\n    load i\n    i64.to_i32\n    i32.const 3\n    newarray i64\n    array.len\n    i32.astore\n    ret\n}\n";
    let rt = Runtime::builder()
        .workers(2)
        .device(Device::Cpu)
        .alloc_policy(AllocPolicy::EdenCas)
        .reclaim(false)
        .build()
        .unwrap();
    let m = rt.load("one.obc", src).unwrap();
    let n = 400_000usize;
    let out = rt.new_array::<i32>(n).unwrap();
    let c = m.closure("one", [(&out).into()]).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let (r, stops) = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let r = par_offload(0..n as i64, &c).unwrap();
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            r
        });
        let mut stops = 0;
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            rt.safepoint(|_| ());
            stops += 1;
        }
        (h.join().unwrap(), stops)
    });
    assert_eq!(rt.read(&out).unwrap(), vec![3; n], "{r}");
    assert!(stops > 0 && r.fallback.is_none(), "{r}");
    let stats = rt.verify_heap(&[&m]).unwrap();
    assert_eq!(stats.arrays, n as u64 + 1, "{stats:?}");
}

/// The uses, in the optimized Cranelift IR `clif`, of a constant defined
/// in another block: `(value, defining block, using block)`.
fn far_constant_uses(clif: &str) -> Vec<(String, String, String)> {
    let mut defs = std::collections::HashMap::new();
    let mut block = String::new();
    let mut uses = Vec::new();
    for line in clif.lines() {
        let code = line.split(';').next().unwrap_or("").trim();
        if code.starts_with("block") && code.ends_with(':') {
            block = code.split(['(', ':']).next().unwrap_or("").to_string();
            continue;
        }
        let (def, rhs) = match code.split_once(" = ") {
            Some((d, r)) if d.starts_with('v') && !d.contains(' ') => (Some(d), r),
            _ => (None, code),
        };
        if let Some(d) = def
            && ["iconst", "f32const", "f64const"]
                .iter()
                .any(|op| rhs.starts_with(op))
        {
            defs.insert(d.to_string(), block.clone());
            continue;
        }
        for tok in rhs.split(|c: char| !c.is_ascii_alphanumeric()) {
            if let Some(at) = defs.get(tok)
                && *at != block
            {
                uses.push((tok.to_string(), at.clone(), block.clone()));
            }
        }
    }
    uses
}

#[test]
fn the_optimized_list_kernel_keeps_no_constant_across_blocks() {
    // Cranelift's elaborator hoists the constants of one copy of the
    // unrolled body (an object's header, a deopt exit's site word) above
    // its loop, where they held a register or a spill slot through every
    // iteration; the JIT gives each using block a copy of its own.
    let rt = cpu().build().unwrap();
    let m = rt
        .load(
            "linkedlist.obc",
            offload_testkit::kernels::example("linkedlist.obc"),
        )
        .unwrap();
    let clif = m.cranelift_ir("linked_list").unwrap();
    assert!(clif.contains("iconst.i64 0x0018_0000_0000"), "{clif}");
    let far = far_constant_uses(&clif);
    assert!(far.is_empty(), "{far:?}\n{clif}");
}
