//! A launch whose objects all die with it hands their memory back to eden
//! (`RuntimeBuilder::reclaim`): on the interpreter and both CPU tiers, the
//! write barrier of `putfield` and `ref.astore` — in compiled code and in
//! the interpreter that replays deopts — keeps any launch that stored a
//! reference to one of its objects into an older object.

use offload::{Arg, Device, Runtime, par_offload};
use offload_jit::Injection;

/// The interpreter, the CPU device's quick tier (a tiered runtime's first
/// launches) and its optimized tier.
fn runtimes() -> Vec<(&'static str, Runtime)> {
    let b = || Runtime::builder().workers(2).tlab_bytes(1024);
    vec![
        (
            "interpreter",
            b().device(Device::Interpreter).build().unwrap(),
        ),
        ("cpu", b().device(Device::Cpu).build().unwrap()),
        (
            "cpu optimized",
            b().device(Device::Cpu).tiered(false).build().unwrap(),
        ),
    ]
}

fn lists(rt: &Runtime) -> offload::Module {
    rt.load(
        "linkedlist.obc",
        offload_testkit::kernels::example("linkedlist.obc"),
    )
    .unwrap()
}

/// Lists of 16 nodes per workitem, summed into `out` (no node escapes):
/// run `reps` times, checking every sum. Returns each launch's report and
/// the heap's size after it.
fn churn(
    rt: &Runtime,
    m: &offload::Module,
    items: usize,
    reps: usize,
) -> Vec<(offload::LaunchReport, u64)> {
    let out = rt.new_array::<i64>(items).unwrap();
    let c = m
        .closure("linked_list", [16i32.into(), (&out).into()])
        .unwrap();
    (0..reps)
        .map(|_| {
            let r = par_offload(0..items as i64, &c).unwrap();
            let got = rt.read(&out).unwrap();
            assert!(
                (0..items)
                    .all(|i| got[i] == offload_testkit::reference::list_sum_expected(i as i64, 16)),
                "{r}"
            );
            (r, rt.heap().used())
        })
        .collect()
}

#[test]
fn launches_whose_objects_die_reuse_the_same_memory() {
    for (name, rt) in runtimes() {
        let m = lists(&rt);
        let runs = churn(&rt, &m, 3000, 20);
        for (r, used) in &runs {
            // 48000 nodes of 24 bytes each: every device hands most of
            // them back as each workitem ends (the nursery reset), the
            // launch the rest when it ends.
            let back = r.alloc.reclaimed + r.alloc.recycled;
            assert!(back >= 48_000 * 24, "{name}: {r}");
            assert!(r.alloc.recycled >= 24_000 * 24, "{name}: {r}");
            assert_eq!(*used, runs[0].1, "{name}: the heap stays put");
        }
        assert!(
            runs[0].0.to_string().contains("handed back"),
            "{}",
            runs[0].0
        );
        rt.verify_heap(&[&m]).unwrap();
    }
    // Kept when asked to.
    let rt = Runtime::builder()
        .workers(2)
        .device(Device::Cpu)
        .reclaim(false)
        .build()
        .unwrap();
    let m = lists(&rt);
    let runs = churn(&rt, &m, 3000, 2);
    assert_eq!(runs[1].0.alloc.reclaimed, 0);
    assert!(runs[1].1 >= runs[0].1 + 48_000 * 24);
    assert!(rt.verify_heap(&[&m]).unwrap().objects >= 2 * 48_000);
}

const BOXES: &str = "
class Box {
    field v: i64
    field next: Box
}

class Boxes {
    field all: Box[]
}

; a fresh array of n boxes, stored into the old h: escapes by putfield
kernel make(i: i64, n: i32, h: Boxes) {
    load h
    load n
    newarray Box
    putfield Boxes.all
    ret
}

; box i (with a second box chained to it) into the old array: escapes by
; ref.astore
kernel fill(i: i64, h: Boxes) {
    local b: Box
    new Box
    store b
    load b
    load i
    putfield Box.v
    load b
    new Box
    putfield Box.next
    load b
    getfield Box.next
    load i
    i64.const 1000
    i64.add
    putfield Box.v
    load h
    getfield Boxes.all
    load i
    i64.to_i32
    load b
    ref.astore
    ret
}

kernel deref(i: i64, h: Boxes, out: i64[]) {
    local b: Box
    load h
    getfield Boxes.all
    load i
    i64.to_i32
    ref.aload
    store b
    load out
    load i
    i64.to_i32
    load b
    getfield Box.v
    load b
    getfield Box.next
    getfield Box.v
    i64.add
    i64.astore
    ret
}
";

/// make, fill (with `rt`), a churn of dead lists that reuses any memory
/// handed back (unless another thread is `busy` with the heap), then
/// deref: every box must still be there.
fn boxes_survive(
    name: &str,
    rt: &Runtime,
    busy: bool,
) -> (offload::LaunchReport, offload::LaunchReport) {
    let n = 2000;
    let m = rt.load("boxes.obc", BOXES).unwrap();
    let l = lists(rt);
    let h = m.new_object("Boxes").unwrap();
    let made = par_offload(0..1, m.closure("make", [Arg::I32(n), (&h).into()]).unwrap()).unwrap();
    let filled = par_offload(0..i64::from(n), m.closure("fill", [(&h).into()]).unwrap()).unwrap();
    let dead = churn(rt, &l, 3000, 3);
    assert!(
        busy || dead.iter().all(|(r, _)| r.alloc.reclaimed > 0),
        "{name}: the churn reuses memory"
    );
    let out = rt.new_array::<i64>(n as usize).unwrap();
    par_offload(
        0..i64::from(n),
        m.closure("deref", [(&h).into(), (&out).into()]).unwrap(),
    )
    .unwrap();
    let want: Vec<i64> = (0..i64::from(n)).map(|i| 2 * i + 1000).collect();
    assert_eq!(rt.read(&out).unwrap(), want, "{name}");
    if !busy {
        rt.verify_heap(&[&m, &l]).unwrap();
    }
    (made, filled)
}

#[test]
fn objects_stored_into_older_objects_are_kept() {
    for (name, rt) in runtimes() {
        let (made, filled) = boxes_survive(name, &rt, false);
        assert_eq!(made.alloc.reclaimed, 0, "{name}: {made}");
        assert_eq!(filled.alloc.reclaimed, 0, "{name}: {filled}");
    }
}

#[test]
fn an_escape_only_a_replay_makes_keeps_the_objects() {
    // Every workitem of `fill` deopts at its first `new` (bci 0), so the
    // interpreter replaying them makes every store; its barrier must see
    // the escape that compiled code never reached.
    let rt = Runtime::builder()
        .workers(2)
        .device(Device::Cpu)
        .inject(Injection {
            site_bci: 0,
            modulus: 1,
            remainder: 0,
            reason: None,
        })
        .build()
        .unwrap();
    let (_, filled) = boxes_survive("replayed", &rt, false);
    assert_eq!(filled.replayed, 2000, "{filled}");
    assert_eq!(filled.deopts.keys().map(|k| k.0).collect::<Vec<_>>(), [0]);
    assert_eq!(filled.alloc.reclaimed, 0, "{filled}");
}

#[test]
fn concurrent_launches_keep_each_others_objects() {
    let rt = Runtime::builder()
        .workers(2)
        .device(Device::Cpu)
        .build()
        .unwrap();
    let m = lists(&rt);
    std::thread::scope(|s| {
        let a = s.spawn(|| churn(&rt, &m, 2000, 30));
        let b = s.spawn(|| boxes_survive("beside a churn", &rt, true));
        a.join().unwrap();
        b.join().unwrap();
    });
    // (`verify_heap` needs every module whose objects the heap holds; the
    // boxes' module is gone with `boxes_survive`, so walk it instead.)
    rt.heap().walk(|_, _| {}).unwrap();
}

#[test]
fn a_launch_stopped_for_a_safepoint_operation_keeps_its_objects() {
    // The operation had the heap to itself: it could have stored a
    // reference to any object anywhere, so the launch keeps them all.
    let rt = Runtime::builder()
        .workers(2)
        .device(Device::Cpu)
        .build()
        .unwrap();
    let m = lists(&rt);
    let out = rt.new_array::<i64>(200_000).unwrap();
    let c = m
        .closure("linked_list", [16i32.into(), (&out).into()])
        .unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let r = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let r = par_offload(0..200_000, &c).unwrap();
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            r
        });
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            rt.safepoint(|_| ());
        }
        h.join().unwrap()
    });
    assert!(r.safepoints > 0, "{r}");
    assert_eq!(r.alloc.reclaimed, 0, "{r}");
    // Without one, the same launch hands them back.
    let again = par_offload(0..200_000, &c).unwrap();
    assert!(again.alloc.reclaimed > 0, "{again}");
}

/// Lists that a workitem keeps (every fifth into `keep`) or drops.
const KEPT_LISTS: &str = "
class Node {
    field val: i64
    field next: Node
}

func total(h: Node) -> i64 {
    local s: i64
    i64.const 0
    store s
  walk:
    load h
    br_null end
    load s
    load h
    getfield Node.val
    i64.add
    store s
    load h
    getfield Node.next
    store h
    br walk
  end:
    load s
    ret
}

; a list of n nodes, summed into out[i]; every fifth list is kept in keep[i]
kernel build(i: i64, n: i32, keep: Node[], out: i64[]) {
    local k: i32
    local head: Node
    local node: Node
    ref.null
    store head
    i32.const 0
    store k
  grow:
    load k
    load n
    i32.ge
    br_if built
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
    load node
    store head
    inc k 1
    br grow
  built:
    load out
    load i
    i64.to_i32
    load head
    call total
    i64.astore
    load i
    i64.const 5
    i64.rem
    i64.const 0
    i64.ne
    br_if done
    load keep
    load i
    i64.to_i32
    load head
    ref.astore
  done:
    ret
}

kernel kept(i: i64, keep: Node[], out: i64[]) {
    load out
    load i
    i64.to_i32
    load keep
    load i
    i64.to_i32
    ref.aload
    call total
    i64.astore
    ret
}

; workitem 0's node goes into keep[0]; every other workitem's node is
; linked in after it (an object of this launch made by another workitem)
kernel chain(i: i64, keep: Node[]) {
    local a: Node
    local b: Node
    new Node
    store b
    load b
    load i
    putfield Node.val
    load keep
    i32.const 0
    ref.aload
    store a
    load a
    br_nonnull link
    load keep
    i32.const 0
    load b
    ref.astore
    ret
  link:
    load b
    load a
    getfield Node.next
    putfield Node.next
    load a
    load b
    putfield Node.next
    ret
}

; out[0] = the sum of the values of the list at keep[0], out[1] = its
; length (counting stops past a million: a cycle fails, not hangs)
kernel count(i: i64, keep: Node[], out: i64[]) {
    local h: Node
    local s: i64
    local c: i64
    load keep
    i32.const 0
    ref.aload
    store h
    i64.const 0
    store s
    i64.const 0
    store c
  walk:
    load h
    br_null end
    load c
    i64.const 1000000
    i64.gt
    br_if end
    load s
    load h
    getfield Node.val
    i64.add
    store s
    load c
    i64.const 1
    i64.add
    store c
    load h
    getfield Node.next
    store h
    br walk
  end:
    load out
    i32.const 0
    load s
    i64.astore
    load out
    i32.const 1
    load c
    i64.astore
    ret
}
";

#[test]
fn lists_a_workitem_keeps_survive_the_workitems_after_it() {
    // The kept lists must not be handed back at their workitem's end
    // (the barrier of the `ref.astore` into the old `keep`), while the
    // dropped ones are; small TLABs make some lists span a refill.
    for (name, rt) in runtimes() {
        let m = rt.load("kept.obc", KEPT_LISTS).unwrap();
        let (items, n) = (4000usize, 12i32);
        let keep = m.new_ref_array("Node", items).unwrap();
        let out = rt.new_array::<i64>(items).unwrap();
        let r = par_offload(
            0..items as i64,
            m.closure("build", [n.into(), (&keep).into(), (&out).into()])
                .unwrap(),
        )
        .unwrap();
        let sums: Vec<i64> = (0..items as i64)
            .map(|i| offload_testkit::reference::list_sum_expected(i, n))
            .collect();
        assert_eq!(rt.read(&out).unwrap(), sums, "{name}: {r}");
        assert_eq!(r.alloc.reclaimed, 0, "{name}: kept lists escaped: {r}");
        assert!(r.alloc.recycled > 0, "{name}: dropped lists: {r}");
        // Dead lists churn through the memory handed back.
        churn(&rt, &lists(&rt), 3000, 2);
        let again = rt.new_array::<i64>(items).unwrap();
        par_offload(
            0..items as i64,
            m.closure("kept", [(&keep).into(), (&again).into()])
                .unwrap(),
        )
        .unwrap();
        let want: Vec<i64> = (0..items)
            .map(|i| if i % 5 == 0 { sums[i] } else { 0 })
            .collect();
        assert_eq!(rt.read(&again).unwrap(), want, "{name}");
        rt.verify_heap(&[&m]).unwrap();
    }
}

#[test]
fn an_object_linked_into_another_workitems_object_survives() {
    // One worker runs the workitems in order, each one's node where the
    // last one's would be reused if its store into workitem 0's node were
    // missed.
    for (workers, device) in [
        (1, Device::Cpu),
        (2, Device::Cpu),
        (1, Device::Interpreter),
        (2, Device::Interpreter),
    ] {
        let rt = Runtime::builder()
            .workers(workers)
            .device(device)
            .tiered(false)
            .build()
            .unwrap();
        let m = rt.load("kept.obc", KEPT_LISTS).unwrap();
        let n = 5000i64;
        let keep = m.new_ref_array("Node", 1).unwrap();
        let r = par_offload(0..n, m.closure("chain", [(&keep).into()]).unwrap()).unwrap();
        assert_eq!(r.alloc.recycled, 0, "{r}");
        assert_eq!(r.alloc.reclaimed, 0, "{r}");
        let out = rt.new_array::<i64>(2).unwrap();
        par_offload(
            0..1,
            m.closure("count", [(&keep).into(), (&out).into()]).unwrap(),
        )
        .unwrap();
        let got = rt.read(&out).unwrap();
        if workers == 1 {
            assert_eq!(got, [n * (n - 1) / 2, n], "{r}");
        } else {
            // Two workers race on the links (a node can be lost), but
            // every node reached is intact and there is no cycle.
            assert!(got[1] > 0 && got[1] <= n, "{got:?} {r}");
        }
        rt.verify_heap(&[&m]).unwrap();
    }
}

#[test]
fn deopted_workitems_keep_their_objects_while_later_ones_are_reset() {
    // Every seventh workitem deopts in its walk (the first `getfield
    // Node.val`, bci 29), with its list in the save record; the
    // workitems its slot runs next reset theirs above it.
    let rt = Runtime::builder()
        .workers(2)
        .device(Device::Cpu)
        .tiered(false)
        .inject(Injection {
            site_bci: 29,
            modulus: 7,
            remainder: 3,
            reason: None,
        })
        .build()
        .unwrap();
    let runs = churn(&rt, &lists(&rt), 7000, 3);
    for (r, _) in &runs {
        assert_eq!(r.replayed, 1000, "{r}");
        assert!(r.alloc.recycled >= 5000 * 16 * 24, "{r}");
    }
    rt.verify_heap(&[&lists(&rt)]).unwrap();
}

/// Each workitem reads its fresh objects before writing them (a new
/// object's fields and elements read as zero), then dirties them: an i32[20]
/// and a node, 14 words, whose memory the next workitem of the slot gets
/// back from the nursery reset — which must zero all of it, the words past
/// the last whole 64 bytes included.
const FRESH: &str = "
class Node {
    field val: i64
    field next: Node
}

kernel fresh(i: i64, out: i64[]) {
    local a: i32[]
    local nd: Node
    local k: i32
    local s: i64
    i32.const 20
    newarray i32
    store a
    new Node
    store nd
    load nd
    getfield Node.val
    store s
    i32.const 0
    store k
  sum:
    load k
    i32.const 20
    i32.ge
    br_if dirty
    load s
    load a
    load k
    i32.aload
    i32.to_i64
    i64.add
    store s
    inc k 1
    br sum
  dirty:
    i32.const 0
    store k
  fill:
    load k
    i32.const 20
    i32.ge
    br_if done
    load a
    load k
    i32.const 7
    i32.astore
    inc k 1
    br fill
  done:
    load nd
    load i
    putfield Node.val
    load out
    load i
    i64.to_i32
    load s
    i64.astore
    ret
}
";

#[test]
fn a_reset_nursery_reads_as_zero_to_the_next_workitem() {
    for (name, rt) in runtimes() {
        let m = rt.load("fresh.obc", FRESH).unwrap();
        let out = rt.array(&vec![-1i64; 5000]).unwrap();
        let c = m.closure("fresh", [(&out).into()]).unwrap();
        for _ in 0..3 {
            let r = par_offload(0..5000, &c).unwrap();
            let got = rt.read(&out).unwrap();
            let bad: Vec<_> = got
                .iter()
                .enumerate()
                .filter(|(_, v)| **v != 0)
                .take(5)
                .collect();
            assert!(bad.is_empty(), "{name}: stale memory read: {bad:?}; {r}");
            if name != "interpreter" {
                assert!(r.alloc.recycled >= 4000 * 14 * 8, "{name}: {r}");
            }
        }
    }
}

/// A kernel that makes far more garbage than the heap holds runs to its end
/// on the interpreter device as on the CPU device: both hand each
/// workitem's dead objects back as it ends, so they agree on which programs
/// run out of memory.
#[test]
fn both_devices_run_a_garbage_making_kernel_in_a_small_heap() {
    for device in [Device::Interpreter, Device::Cpu] {
        let rt = Runtime::builder()
            .workers(2)
            .device(device)
            .tiered(false)
            .initial_heap(1 << 20)
            .max_heap(2 << 20)
            .build()
            .unwrap();
        let m = lists(&rt);
        // 20000 lists of 64 nodes of 24 bytes: 30 MiB of garbage in a heap
        // of 2 MiB.
        let items = 20_000usize;
        let out = rt.new_array::<i64>(items).unwrap();
        let c = m
            .closure("linked_list", [64i32.into(), (&out).into()])
            .unwrap();
        let r = par_offload(0..items as i64, &c)
            .unwrap_or_else(|e| panic!("{device:?} ran out of memory: {e}"));
        let got = rt.read(&out).unwrap();
        assert!(
            (0..items)
                .all(|i| got[i] == offload_testkit::reference::list_sum_expected(i as i64, 64)),
            "{device:?}: {r}"
        );
        assert!(r.alloc.recycled > 20 << 20, "{device:?}: {r}");
        rt.verify_heap(&[&m]).unwrap();
    }
}
