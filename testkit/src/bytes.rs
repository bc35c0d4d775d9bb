//! `offload bench --device cuda`, bytes moved: saxpy over two `f32`
//! arrays (128 MiB at full size) launched 20 times on the same data, with
//! the bytes each launch moves between host and device memory
//! ([`offload::LaunchReport::to_device_bytes`] and `to_host_bytes`), and
//! the bytes a host read of the result fetches afterwards. Byte counts are
//! exact on the virtual GPU too (they do not depend on timing).

use crate::kernels::example;
use offload::diagnostics::bytes_text;
use offload::{OffloadError, Runtime, par_offload};

/// Launches of the measurement.
pub const LAUNCHES: usize = 20;

/// What saxpy's launches moved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transfers {
    /// Bytes of data the kernel runs over (both arrays).
    pub data_bytes: u64,
    /// The first launch's bytes, to the device and back.
    pub first: (u64, u64),
    /// Each later launch's bytes, to the device and back (equal for every
    /// one of them here; the largest is reported).
    pub later: (u64, u64),
    /// Heap bytes the host read of `y` after the last launch fetched.
    pub read_back: u64,
}

/// Saxpy over `(1 << 24) / shrink` elements, [`LAUNCHES`] times.
pub fn saxpy(rt: &Runtime, shrink: usize) -> Result<Transfers, OffloadError> {
    let n = (1usize << 24) / shrink.max(1);
    let m = rt.load("saxpy.obc", example("saxpy.obc"))?;
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let (xa, ya) = (rt.array(&x)?, rt.array(&vec![1.0f32; n])?);
    let c = m.closure("saxpy", [2.0f32.into(), (&xa).into(), (&ya).into()])?;
    let mut first = (0, 0);
    let mut later = (0, 0);
    for i in 0..LAUNCHES {
        let r = par_offload(0..n as i64, &c)?;
        let b = (r.to_device_bytes, r.to_host_bytes);
        if i == 0 {
            first = b;
        } else {
            later = (later.0.max(b.0), later.1.max(b.1));
        }
    }
    let before = rt.heap().residency().fetched_bytes;
    let y = rt.read(&ya)?;
    let read_back = rt.heap().residency().fetched_bytes - before;
    // saxpy with a = 2, launched LAUNCHES times: y = 1 + 2·LAUNCHES·x.
    let want = |i: usize| 1.0 + (2 * LAUNCHES) as f32 * x[i];
    if let Some(i) = (0..n).find(|&i| y[i] != want(i)) {
        return Err(OffloadError::Setup(format!(
            "saxpy: y[{i}] is {} after {LAUNCHES} launches, not {}",
            y[i],
            want(i)
        )));
    }
    Ok(Transfers {
        data_bytes: 8 * n as u64,
        first,
        later,
        read_back,
    })
}

impl Transfers {
    /// One JSON object.
    pub fn json(&self) -> String {
        serde_json::json!({
            "bench": "saxpy bytes moved",
            "data_bytes": self.data_bytes,
            "launches": LAUNCHES,
            "first_to_device": self.first.0,
            "first_to_host": self.first.1,
            "later_to_device": self.later.0,
            "later_to_host": self.later.1,
            "read_back": self.read_back,
        })
        .to_string()
    }

    /// The figures as a table.
    pub fn table(&self) -> String {
        let mut t = offload::table::new(["saxpy, bytes moved", "to the device", "back"]);
        t.add_row([
            format!(
                "first of {LAUNCHES} launches over {}",
                bytes_text(self.data_bytes)
            ),
            bytes_text(self.first.0),
            bytes_text(self.first.1),
        ]);
        t.add_row([
            "each later launch (the largest)".to_string(),
            bytes_text(self.later.0),
            bytes_text(self.later.1),
        ]);
        t.add_row([
            "reading y on the host after them".to_string(),
            "0 B".into(),
            bytes_text(self.read_back),
        ]);
        offload::table::right(&mut t, &[1, 2]);
        offload::table::text(&t)
    }
}
