//! Metadata, save area, never-ran set and counters.

use offload_deopt::{
    DeoptCounters, DeoptError, DeoptMetadata, KernelVersion, NeverRan, Reason, Record, SaveArea,
    SaveLayout,
};
use offload_ir::analysis::{Value, analyze};
use offload_ir::{FuncId, SiteId, Verified};
use proptest::prelude::*;
use std::collections::HashSet;
use std::path::PathBuf;

fn examples() -> Vec<(String, Verified)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/kernels");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        // The bytecode versions (`.ofk` beside them is source).
        .filter(|p| p.extension().is_some_and(|e| e == "obc"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let src = std::fs::read_to_string(&p).unwrap();
            (name.clone(), offload_ir::load(&name, &src).unwrap())
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn kernel_meta(v: &Verified) -> DeoptMetadata {
    let k = v.kernels().next().unwrap();
    DeoptMetadata::new(&analyze(v, k), k, 0)
}

#[test]
fn every_example_has_a_consistent_layout() {
    for (name, v) in examples() {
        let meta = kernel_meta(&v);
        let widest = meta.sites.iter().map(|s| s.slots.len()).max().unwrap();
        assert_eq!(
            meta.layout.record_words,
            SaveLayout::HEADER_WORDS + widest as u32,
            "{name}"
        );
        for s in &meta.sites {
            let words: HashSet<u32> = s.slots.iter().map(|l| l.word).collect();
            assert_eq!(words.len(), s.slots.len(), "{name}: words are distinct");
            assert!(
                s.slots.iter().all(
                    |l| l.word >= SaveLayout::HEADER_WORDS && l.word < meta.layout.record_words
                )
            );
            assert_eq!(s.ref_words().count(), s.frame.refs().count());
            assert!(
                !s.reasons.is_empty(),
                "{name}: site {} has no reason",
                s.bci
            );
            if s.bci == 0 {
                assert!(s.reasons.contains(&Reason::Safepoint));
            }
        }
    }
}

#[test]
fn saxpy_sites_and_reasons() {
    let (_, v) = examples()
        .into_iter()
        .find(|(n, _)| n == "saxpy.obc")
        .unwrap();
    let meta = kernel_meta(&v);
    let reasons: Vec<Vec<Reason>> = meta.sites.iter().map(|s| s.reasons.clone()).collect();
    assert_eq!(
        reasons,
        [
            vec![Reason::Safepoint],
            vec![Reason::NullCheck, Reason::BoundsCheck],
            vec![Reason::NullCheck, Reason::BoundsCheck],
            vec![Reason::NullCheck, Reason::BoundsCheck],
        ]
    );
    // x[j]: y and j live, then the five stack slots; y is a reference.
    let s = &meta.sites[1];
    assert_eq!(s.slots[0].value, Value::Local(offload_ir::LocalId(3)));
    assert_eq!(s.ref_words().collect::<Vec<_>>(), [2, 4, 7]);
    assert_eq!(meta.layout.record_words, 9);
}

#[test]
fn save_area_round_trips_and_rejects_nonsense() {
    let (_, v) = examples()
        .into_iter()
        .find(|(n, _)| n == "saxpy.obc")
        .unwrap();
    let meta = kernel_meta(&v);
    let area = SaveArea::new(3, meta.layout);
    assert_eq!(area.bytes(), 3 * 9 * 8);
    assert!(area.records(&meta).unwrap().is_empty());
    assert!(area.is_clear());
    let r = Record {
        workitem: 1 << 40,
        site: SiteId(1),
        reason: Reason::BoundsCheck,
        values: vec![1, 2, 3, 4, 5, 6, 7],
    };
    area.write(1, &r).unwrap();
    assert!(!area.is_clear());
    assert_eq!(area.read(1, &meta).unwrap(), Some(r.clone()));
    assert_eq!(area.records(&meta).unwrap(), vec![r.clone()]);
    assert!(matches!(
        area.write(3, &r),
        Err(DeoptError::NoSuchSlot { .. })
    ));
    let wide = Record {
        values: vec![0; 8],
        ..r.clone()
    };
    assert!(matches!(
        area.write(0, &wide),
        Err(DeoptError::TooWide { .. })
    ));
    // A reason the site cannot have, and a site the kernel does not have.
    area.write(
        0,
        &Record {
            reason: Reason::DivideByZero,
            ..r.clone()
        },
    )
    .unwrap();
    assert!(matches!(
        area.read(0, &meta),
        Err(DeoptError::BadReason { .. })
    ));
    area.write(
        0,
        &Record {
            site: SiteId(99),
            ..r.clone()
        },
    )
    .unwrap();
    assert!(matches!(
        area.read(0, &meta),
        Err(DeoptError::BadSite { .. })
    ));
    assert!(!area.is_clear());
    area.clear_one(0).unwrap();
    assert!(!area.is_clear(), "record 1 is still there");
    assert!(area.is_clear_in(0..1) && area.is_clear_in(2..100));
    assert!(!area.is_clear_in(0..2) && !area.is_clear_in(1..2));
    area.clear();
    assert!(area.records(&meta).unwrap().is_empty());
    assert!(area.is_clear());
    // An area whose size overflows, or that no allocator gives, is an
    // error naming its size, not an abort.
    for slots in [usize::MAX / 2, 1 << 58] {
        let e = SaveArea::try_new(slots, meta.layout).unwrap_err();
        assert!(matches!(e, DeoptError::TooLarge { records, record_words: 9 } if records == slots));
        assert!(e.to_string().contains("cannot be allocated"), "{e}");
    }
    assert_eq!(
        SaveArea::try_new(3, meta.layout).unwrap().bytes(),
        3 * 9 * 8
    );
}

#[test]
fn reasons_round_trip_their_codes() {
    for r in Reason::ALL {
        assert_eq!(Reason::from_code(r.code()), Some(r));
    }
    assert_eq!(Reason::from_code(99), None);
    assert_eq!(
        Reason::BoundsCheck.exception(),
        Some(offload_ir::ExceptionKind::IndexOutOfBounds)
    );
    assert_eq!(Reason::Safepoint.exception(), None);
}

#[test]
fn counters_are_exact_under_contention() {
    let c = DeoptCounters::new();
    let kv = KernelVersion {
        kernel: FuncId(0),
        version: 1,
    };
    std::thread::scope(|s| {
        for t in 0..4 {
            let c = &c;
            s.spawn(move || {
                for i in 0..10_000u32 {
                    c.add(
                        kv,
                        SiteId(i % 3),
                        if t % 2 == 0 {
                            Reason::NullCheck
                        } else {
                            Reason::Safepoint
                        },
                        1,
                    );
                }
            });
        }
    });
    assert_eq!(c.total(kv), 40_000);
    assert_eq!(c.by_reason(kv)[&Reason::NullCheck], 20_000);
    assert_eq!(c.get(kv, SiteId(0), Reason::Safepoint), 6_668);
    assert_eq!(
        c.total(KernelVersion {
            kernel: FuncId(0),
            version: 2
        }),
        0
    );
    assert_eq!(c.by_site(kv).len(), 6);
}

/// The slot protocol of docs/DESIGN.md ("How a launch flows") at the level of its
/// bookkeeping: C slots claim chunks from a cursor; before each workitem a slot
/// reads the control word; a deopting workitem writes its record and raises
/// the flag. The outcome must partition the range: every workitem completed,
/// deopted, or never ran — exactly one of them.
fn simulate(
    len: i64,
    slots: usize,
    chunk: i64,
    deopts: &HashSet<i64>,
    schedule: &[u8],
) -> (Vec<i64>, Vec<i64>, NeverRan) {
    let mut cursor = 0i64;
    let mut flag = false;
    let mut current: Vec<Option<std::ops::Range<i64>>> = vec![None; slots];
    let mut exited = vec![false; slots];
    let mut completed = Vec::new();
    let mut deopted = Vec::new();
    let mut never = NeverRan::new(slots);
    let mut step = 0;
    while exited.iter().any(|e| !e) {
        let pick = schedule[step % schedule.len()] as usize % slots;
        step += 1;
        // The scheduled slot, or the next one still running.
        let s = (0..slots)
            .map(|k| (pick + k) % slots)
            .find(|&s| !exited[s])
            .expect("one is running");
        match current[s].clone() {
            None => {
                if cursor >= len || flag {
                    exited[s] = true; // nothing claimed: nothing to record
                } else {
                    let hi = (cursor + chunk).min(len);
                    current[s] = Some(cursor..hi);
                    cursor = hi;
                }
            }
            Some(r) if r.start >= r.end => current[s] = None,
            Some(r) => {
                if flag {
                    never.set_slot(s, r);
                    exited[s] = true;
                    continue;
                }
                let w = r.start;
                if deopts.contains(&w) {
                    deopted.push(w);
                    flag = true;
                    never.set_slot(s, w + 1..r.end);
                    exited[s] = true;
                } else {
                    completed.push(w);
                    current[s] = Some(w + 1..r.end);
                }
            }
        }
    }
    never.rest = cursor..len;
    (completed, deopted, never)
}

proptest! {
    #[test]
    fn never_ran_is_bounded_and_the_launch_partitions_the_range(
        len in 0i64..3000,
        slots in 1usize..9,
        chunk in 1i64..64,
        deopts in proptest::collection::hash_set(0i64..3000, 0..5),
        schedule in proptest::collection::vec(any::<u8>(), 1..64),
    ) {
        let (completed, deopted, never) = simulate(len, slots, chunk, &deopts, &schedule);
        prop_assert!(deopted.len() <= slots, "at most one record per slot");
        prop_assert!(never.slots.len() == slots, "O(C) never-ran description");
        let mut seen = vec![0u8; len as usize];
        for w in completed.iter().chain(&deopted) {
            seen[*w as usize] += 1;
        }
        for r in never.ranges() {
            for w in r {
                seen[w as usize] += 1;
            }
        }
        prop_assert!(seen.iter().all(|&n| n == 1), "every workitem exactly once");
        prop_assert_eq!(never.count() as usize + completed.len() + deopted.len(), len as usize);
    }
}
