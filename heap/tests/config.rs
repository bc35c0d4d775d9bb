//! Heap configurations that cannot work are refused with a message naming
//! the setting and its value, before any memory is mapped.

use offload_heap::{Heap, HeapConfig, HeapError, MAX_HEAP_BYTES, MIN_HEAP_BYTES};

fn refused(cfg: HeapConfig) -> String {
    match Heap::new(cfg) {
        Err(e @ HeapError::Config(_)) => e.to_string(),
        Err(e) => panic!("{cfg:?}: not a configuration error: {e}"),
        Ok(_) => panic!("{cfg:?} was accepted"),
    }
}

#[test]
fn bad_configurations_say_what_is_wrong() {
    let base = HeapConfig {
        initial: 1 << 20,
        max: 16 << 20,
        tlab_bytes: 4096,
        grow_step: 1 << 20,
    };
    let e = refused(HeapConfig {
        initial: 0,
        max: 0,
        ..base
    });
    assert!(
        e.contains("maximum 0 bytes is below the smallest heap, 4096"),
        "{e}"
    );
    let e = refused(HeapConfig {
        max: MAX_HEAP_BYTES + 8,
        ..base
    });
    assert!(e.contains("exceeds 17179869184"), "{e}");
    let e = refused(HeapConfig {
        initial: 32 << 20,
        ..base
    });
    assert!(
        e.contains("initial size 33554432 bytes exceeds the maximum, 16777216"),
        "{e}"
    );
    for tlab in [0, 8, 100] {
        let e = refused(HeapConfig {
            tlab_bytes: tlab,
            ..base
        });
        assert!(
            e.contains(&format!(
                "a TLAB of {tlab} bytes: it must be a multiple of 8, at least 64"
            )),
            "{e}"
        );
    }
    let e = refused(HeapConfig {
        tlab_bytes: 16 << 20,
        ..base
    });
    assert!(e.contains("does not fit twice in the maximum heap"), "{e}");
    // The edges are accepted.
    Heap::new(HeapConfig {
        initial: 0,
        max: MIN_HEAP_BYTES,
        tlab_bytes: 64,
        ..base
    })
    .unwrap();
    Heap::new(HeapConfig {
        initial: 16 << 20,
        tlab_bytes: 8 << 20,
        ..base
    })
    .unwrap();
}
