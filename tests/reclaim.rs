//! A launch whose objects all die with it hands their memory back to eden
//! (`RuntimeBuilder::reclaim`): on the interpreter and both CPU tiers, the
//! write barrier of `putfield` and `ref.astore` — in compiled code and in
//! the interpreter that replays deopts — keeps any launch that stored a
//! reference to one of its objects into an older object.

use offload::bench::LIST_KERNEL;
use offload::{Arg, Device, Runtime, par_offload};
use offload_jit::cpu::Injection;

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
    rt.load("list.obc", LIST_KERNEL).unwrap()
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
    let c = m.closure("list", [16i32.into(), (&out).into()]).unwrap();
    (0..reps)
        .map(|_| {
            let r = par_offload(0..items as i64, &c).unwrap();
            let got = rt.read(&out).unwrap();
            assert!(
                (0..items).all(|i| got[i] == offload::reference::list_sum_expected(i as i64, 16)),
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
            // 48000 nodes of 24 bytes each.
            assert!(r.alloc.reclaimed >= 48_000 * 24, "{name}: {r}");
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
    let made = par_offload(
        0..1,
        &m.closure("make", [Arg::I32(n), (&h).into()]).unwrap(),
    )
    .unwrap();
    let filled = par_offload(0..i64::from(n), &m.closure("fill", [(&h).into()]).unwrap()).unwrap();
    let dead = churn(rt, &l, 3000, 3);
    assert!(
        busy || dead.iter().all(|(r, _)| r.alloc.reclaimed > 0),
        "{name}: the churn reuses memory"
    );
    let out = rt.new_array::<i64>(n as usize).unwrap();
    par_offload(
        0..i64::from(n),
        &m.closure("deref", [(&h).into(), (&out).into()]).unwrap(),
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
    let c = m.closure("list", [16i32.into(), (&out).into()]).unwrap();
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
