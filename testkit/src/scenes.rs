//! The virtual-dispatch workloads (`examples/kernels/raycast.ofk` and
//! `particles.ofk`): their inputs, built the same way on the host for
//! offload (objects of six classes, made through the public API, so they
//! lie on pages of their class) and for Rust, and native references with
//! trait objects — Rust's own virtual calls — doing the same
//! floating-point operations in the same order, so that results match bit
//! for bit.

use crate::reference::Rng;
use offload::{Module, Object, OffloadError, RefArray};
use rayon::prelude::*;

/// One object to make: its class and its `f32` fields by name (the `id`
/// field, an `i32`, is its position).
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// The class's name in the example.
    pub class: &'static str,
    /// Field values, by name.
    pub fields: Vec<(&'static str, f32)>,
}

impl Spec {
    fn field(&self, name: &str) -> f32 {
        self.fields
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, v)| v)
            .expect("a field of the spec")
    }
}

/// Make the objects of `specs` in module `m` (from the host: each class on
/// pages of its own) in an array of `base` references, with `id` their
/// position; the array and a handle of each object.
pub fn make_objects(
    m: &Module,
    base: &str,
    specs: &[Spec],
) -> Result<(RefArray, Vec<Object>), OffloadError> {
    let a = m.new_ref_array(base, specs.len())?;
    let mut objs = Vec::with_capacity(specs.len());
    for (i, s) in specs.iter().enumerate() {
        let o = m.new_object(s.class)?;
        m.set_field(&o, "id", i as i32)?;
        for &(f, v) in &s.fields {
            m.set_field(&o, f, v)?;
        }
        m.set_element(&a, i, &o)?;
        objs.push(o);
    }
    Ok((a, objs))
}

/// A scene of `n` shapes of the six classes of `raycast.ofk`, in front of
/// the camera, drawn from `seed`.
pub fn scene(n: usize, seed: u64) -> Vec<Spec> {
    let mut r = Rng::new(seed);
    (0..n)
        .map(|_| {
            let (x, y, z) = (
                r.f32_in(-6.0, 6.0),
                r.f32_in(-6.0, 6.0),
                r.f32_in(2.0, 30.0),
            );
            let size = r.f32_in(0.05, 0.6);
            let (class, fields) = match r.below(6) {
                0 => ("Sphere", vec![("cx", x), ("cy", y), ("cz", z), ("r", size)]),
                1 => (
                    "Plane",
                    vec![("nx", 0.0), ("ny", 0.0), ("nz", 1.0), ("d", z + 40.0)],
                ),
                2 => ("Disc", vec![("cx", x), ("cy", y), ("cz", z), ("r", size)]),
                3 => (
                    "Cube",
                    vec![
                        ("x0", x),
                        ("y0", y),
                        ("z0", z),
                        ("x1", x + size),
                        ("y1", y + size),
                        ("z1", z + size),
                    ],
                ),
                4 => (
                    "Tube",
                    vec![
                        ("cx", x),
                        ("cz", z),
                        ("r", size / 2.0),
                        ("y0", y),
                        ("y1", y + 2.0 * size),
                    ],
                ),
                _ => (
                    "Tri",
                    vec![
                        ("vx", x),
                        ("vy", y),
                        ("vz", z),
                        ("ex", size),
                        ("ey", r.f32_in(-0.3, 0.3)),
                        ("ez", r.f32_in(-0.3, 0.3)),
                        ("fx", r.f32_in(-0.3, 0.3)),
                        ("fy", size),
                        ("fz", r.f32_in(-0.3, 0.3)),
                    ],
                ),
            };
            Spec { class, fields }
        })
        .collect()
}

/// A shape of the native scene: what `Shape.hit` does.
pub trait Hit: Send + Sync {
    /// The distance along the ray `o + t d` to the shape, or negative.
    fn hit(&self, o: [f32; 3], d: [f32; 3]) -> f32;
}

struct Sphere([f32; 4]);
struct Plane([f32; 4]);
struct Disc([f32; 4]);
struct Cube([f32; 6]);
struct Tube([f32; 5]);
struct Tri([f32; 9]);

impl Hit for Sphere {
    fn hit(&self, [ox, oy, oz]: [f32; 3], [dx, dy, dz]: [f32; 3]) -> f32 {
        let [cx, cy, cz, r] = self.0;
        let (px, py, pz) = (ox - cx, oy - cy, oz - cz);
        let b = px * dx + py * dy + pz * dz;
        let c = px * px + py * py + pz * pz - r * r;
        let disc = b * b - c;
        if disc < 0.0 {
            return -1.0;
        }
        -b - disc.sqrt()
    }
}

impl Hit for Plane {
    fn hit(&self, [ox, oy, oz]: [f32; 3], [dx, dy, dz]: [f32; 3]) -> f32 {
        let [nx, ny, nz, d] = self.0;
        let den = nx * dx + ny * dy + nz * dz;
        if den.abs() < 0.000001 {
            return -1.0;
        }
        (d - (nx * ox + ny * oy + nz * oz)) / den
    }
}

impl Hit for Disc {
    fn hit(&self, [ox, oy, oz]: [f32; 3], [dx, dy, dz]: [f32; 3]) -> f32 {
        let [cx, cy, cz, r] = self.0;
        if dz.abs() < 0.000001 {
            return -1.0;
        }
        let t = (cz - oz) / dz;
        let px = ox + t * dx - cx;
        let py = oy + t * dy - cy;
        if px * px + py * py > r * r {
            return -1.0;
        }
        t
    }
}

impl Hit for Cube {
    fn hit(&self, [ox, oy, oz]: [f32; 3], [dx, dy, dz]: [f32; 3]) -> f32 {
        let [x0, y0, z0, x1, y1, z1] = self.0;
        let (ax, bx) = ((x0 - ox) / dx, (x1 - ox) / dx);
        let (ay, by) = ((y0 - oy) / dy, (y1 - oy) / dy);
        let (az, bz) = ((z0 - oz) / dz, (z1 - oz) / dz);
        let near = ax.min(bx).max(ay.min(by)).max(az.min(bz));
        let far = ax.max(bx).min(ay.max(by)).min(az.max(bz));
        if near > far {
            return -1.0;
        }
        near
    }
}

impl Hit for Tube {
    fn hit(&self, [ox, oy, oz]: [f32; 3], [dx, dy, dz]: [f32; 3]) -> f32 {
        let [cx, cz, r, y0, y1] = self.0;
        let (px, pz) = (ox - cx, oz - cz);
        let a = dx * dx + dz * dz;
        if a < 0.000000001 {
            return -1.0;
        }
        let b = px * dx + pz * dz;
        let c = px * px + pz * pz - r * r;
        let disc = b * b - a * c;
        if disc < 0.0 {
            return -1.0;
        }
        let t = (-b - disc.sqrt()) / a;
        let y = oy + t * dy;
        if y < y0 || y > y1 {
            return -1.0;
        }
        t
    }
}

impl Hit for Tri {
    fn hit(&self, [ox, oy, oz]: [f32; 3], [dx, dy, dz]: [f32; 3]) -> f32 {
        let [vx, vy, vz, ex, ey, ez, fx, fy, fz] = self.0;
        let (px, py, pz) = (dy * fz - dz * fy, dz * fx - dx * fz, dx * fy - dy * fx);
        let det = ex * px + ey * py + ez * pz;
        if det.abs() < 0.0000001 {
            return -1.0;
        }
        let inv = 1.0 / det;
        let (sx, sy, sz) = (ox - vx, oy - vy, oz - vz);
        let u = (sx * px + sy * py + sz * pz) * inv;
        if !(0.0..=1.0).contains(&u) {
            return -1.0;
        }
        let (qx, qy, qz) = (sy * ez - sz * ey, sz * ex - sx * ez, sx * ey - sy * ex);
        let v = (dx * qx + dy * qy + dz * qz) * inv;
        if v < 0.0 || u + v > 1.0 {
            return -1.0;
        }
        (fx * qx + fy * qy + fz * qz) * inv
    }
}

/// The native scene: a trait object per shape.
pub fn native_scene(specs: &[Spec]) -> Vec<Box<dyn Hit>> {
    specs
        .iter()
        .map(|s| {
            let f = |names: &[&str]| names.iter().map(|n| s.field(n)).collect::<Vec<_>>();
            let b: Box<dyn Hit> = match s.class {
                "Sphere" => Box::new(Sphere(f(&["cx", "cy", "cz", "r"]).try_into().unwrap())),
                "Plane" => Box::new(Plane(f(&["nx", "ny", "nz", "d"]).try_into().unwrap())),
                "Disc" => Box::new(Disc(f(&["cx", "cy", "cz", "r"]).try_into().unwrap())),
                "Cube" => Box::new(Cube(
                    f(&["x0", "y0", "z0", "x1", "y1", "z1"]).try_into().unwrap(),
                )),
                "Tube" => Box::new(Tube(f(&["cx", "cz", "r", "y0", "y1"]).try_into().unwrap())),
                _ => Box::new(Tri(f(&[
                    "vx", "vy", "vz", "ex", "ey", "ez", "fx", "fy", "fz",
                ])
                .try_into()
                .unwrap())),
            };
            b
        })
        .collect()
}

/// Pixel `i` of `raycast`: its depth and the id of the shape it sees.
pub fn raycast_pixel(i: i32, w: i32, h: i32, scene: &[Box<dyn Hit>]) -> (f32, i32) {
    let x = (i % w) as f32;
    let y = (i / w) as f32;
    let sx = (x + 0.5) / (w as f32) - 0.5;
    let sy = (y + 0.5) / (h as f32) - 0.5;
    let inv = 1.0 / (sx * sx + sy * sy + 1.0).sqrt();
    let d = [sx * inv, sy * inv, inv];
    let n = scene.len();
    let (mut best, mut id) = (1.0e30f32, -1);
    let mut k = i as usize % n;
    for _ in 0..n {
        let t = scene[k].hit([0.0, 0.0, -5.0], d);
        if t > 0.001 && (t < best || (t == best && (k as i32) < id)) {
            best = t;
            id = k as i32;
        }
        k += 1;
        if k == n {
            k = 0;
        }
    }
    (best, id)
}

/// `raycast` over a `w × h` image, on every core.
pub fn raycast_par(w: i32, h: i32, scene: &[Box<dyn Hit>], depth: &mut [f32], hit: &mut [i32]) {
    depth
        .par_iter_mut()
        .zip(hit.par_iter_mut())
        .enumerate()
        .for_each(|(i, (d, h2))| (*d, *h2) = raycast_pixel(i as i32, w, h, scene));
}

/// A population of `n` particles of the six classes of `particles.ofk`,
/// their kinds mixed at random, drawn from `seed`.
pub fn population(n: usize, seed: u64) -> Vec<Spec> {
    let mut r = Rng::new(seed);
    (0..n)
        .map(|_| {
            let mut fields = vec![
                ("x", r.f32_in(-4.0, 4.0)),
                ("y", r.f32_in(-4.0, 4.0)),
                ("vx", r.f32_in(-1.0, 1.0)),
                ("vy", r.f32_in(-1.0, 1.0)),
            ];
            let class = match r.below(6) {
                0 => {
                    fields.push(("g", 9.81));
                    "Ballistic"
                }
                1 => {
                    fields.push(("k", r.f32_in(0.1, 2.0)));
                    "Dragged"
                }
                2 => {
                    fields.push(("k", r.f32_in(0.5, 4.0)));
                    "Sprung"
                }
                3 => {
                    fields.push(("half", 5.0));
                    "Boxed"
                }
                4 => {
                    let a = r.f32_in(-0.05, 0.05);
                    fields.push(("c", a.cos()));
                    fields.push(("s", a.sin()));
                    "Spinning"
                }
                _ => {
                    fields.push(("ex", r.f32_in(-1.0, 1.0)));
                    fields.push(("ey", r.f32_in(-1.0, 1.0)));
                    fields.push(("vmax", 2.0));
                    "Charged"
                }
            };
            Spec { class, fields }
        })
        .collect()
}

/// A native particle: `[x, y, vx, vy]` and its law.
#[derive(Clone, Debug)]
pub struct NativeParticle {
    /// Position and velocity.
    pub state: [f32; 4],
    law: Law,
}

#[derive(Clone, Debug)]
enum Law {
    Ballistic(f32),
    Dragged(f32),
    Sprung(f32),
    Boxed(f32),
    Spinning(f32, f32),
    Charged(f32, f32, f32),
}

/// What `Particle.step` does, as Rust's virtual call.
pub trait Step {
    /// One step of `dt`.
    fn step(&mut self, dt: f32);
    /// `[x, y, vx, vy]`.
    fn state(&self) -> [f32; 4];
}

impl Step for NativeParticle {
    fn state(&self) -> [f32; 4] {
        self.state
    }

    fn step(&mut self, dt: f32) {
        let [x, y, vx, vy] = &mut self.state;
        match self.law {
            Law::Ballistic(g) => {
                *vy -= g * dt;
                *x += *vx * dt;
                *y += *vy * dt;
            }
            Law::Dragged(k) => {
                let f = 1.0 - k * dt;
                *vx *= f;
                *vy *= f;
                *x += *vx * dt;
                *y += *vy * dt;
            }
            Law::Sprung(k) => {
                *vx -= k * *x * dt;
                *vy -= k * *y * dt;
                *x += *vx * dt;
                *y += *vy * dt;
            }
            Law::Boxed(half) => {
                *x += *vx * dt;
                *y += *vy * dt;
                if *x > half || *x < -half {
                    *vx = -*vx;
                }
                if *y > half || *y < -half {
                    *vy = -*vy;
                }
            }
            Law::Spinning(c, s) => {
                let nvx = *vx * c - *vy * s;
                let nvy = *vx * s + *vy * c;
                *vx = nvx;
                *vy = nvy;
                *x += nvx * dt;
                *y += nvy * dt;
            }
            Law::Charged(ex, ey, vmax) => {
                *vx += ex * dt;
                *vy += ey * dt;
                let v2 = *vx * *vx + *vy * *vy;
                if v2 > vmax * vmax {
                    let f = vmax / v2.sqrt();
                    *vx *= f;
                    *vy *= f;
                }
                *x += *vx * dt;
                *y += *vy * dt;
            }
        }
    }
}

/// The native population (trait-object calls through [`Step`]).
pub fn native_population(specs: &[Spec]) -> Vec<Box<dyn Step + Send + Sync>> {
    specs
        .iter()
        .map(|s| {
            let state = [s.field("x"), s.field("y"), s.field("vx"), s.field("vy")];
            let law = match s.class {
                "Ballistic" => Law::Ballistic(s.field("g")),
                "Dragged" => Law::Dragged(s.field("k")),
                "Sprung" => Law::Sprung(s.field("k")),
                "Boxed" => Law::Boxed(s.field("half")),
                "Spinning" => Law::Spinning(s.field("c"), s.field("s")),
                _ => Law::Charged(s.field("ex"), s.field("ey"), s.field("vmax")),
            };
            let b: Box<dyn Step + Send + Sync> = Box::new(NativeParticle { state, law });
            b
        })
        .collect()
}

/// `particles`: every particle `steps` steps of `dt`, on every core.
pub fn particles_par(ps: &mut [Box<dyn Step + Send + Sync>], steps: i32, dt: f32) {
    ps.par_iter_mut().for_each(|p| {
        for _ in 0..steps {
            p.step(dt);
        }
    });
}

/// Run `raycast.obc` on `rt` over a `w × h` image of `scene` (made by the
/// host), and check every pixel against [`raycast_pixel`] bit for bit.
/// Returns the launch's report.
pub fn check_raycast(
    rt: &offload::Runtime,
    w: i32,
    h: i32,
    specs: &[Spec],
) -> Result<offload::LaunchReport, String> {
    let e = |e: OffloadError| e.to_string();
    let m = rt
        .load("raycast.obc", crate::kernels::example("raycast.obc"))
        .map_err(e)?;
    let (scene, _objs) = make_objects(&m, "Shape", specs).map_err(e)?;
    let n = (w * h) as usize;
    let (depth, hit) = (
        rt.new_array::<f32>(n).map_err(e)?,
        rt.new_array::<i32>(n).map_err(e)?,
    );
    let c = m
        .closure(
            "raycast",
            [
                w.into(),
                h.into(),
                (&scene).into(),
                (&depth).into(),
                (&hit).into(),
            ],
        )
        .map_err(e)?;
    let rep = offload::par_offload(0..n as i64, &c).map_err(e)?;
    let native = native_scene(specs);
    let (d, hs) = (rt.read(&depth).map_err(e)?, rt.read(&hit).map_err(e)?);
    for i in 0..n {
        let want = raycast_pixel(i as i32, w, h, &native);
        if (d[i].to_bits(), hs[i]) != (want.0.to_bits(), want.1) {
            return Err(format!("pixel {i}: ({}, {}), native {want:?}", d[i], hs[i]));
        }
    }
    if !hs.iter().any(|&h| h >= 0) {
        return Err("no pixel hit a shape".into());
    }
    Ok(rep)
}

/// Run `particles.obc` on `rt` over `specs` (made by the host) and check
/// every particle's state against [`particles_par`] bit for bit. Returns
/// the launch's report.
pub fn check_particles(
    rt: &offload::Runtime,
    specs: &[Spec],
    steps: i32,
    dt: f32,
) -> Result<offload::LaunchReport, String> {
    let e = |e: OffloadError| e.to_string();
    let m = rt
        .load("particles.obc", crate::kernels::example("particles.obc"))
        .map_err(e)?;
    let (ps, objs) = make_objects(&m, "Particle", specs).map_err(e)?;
    let c = m
        .closure("particles", [steps.into(), dt.into(), (&ps).into()])
        .map_err(e)?;
    let rep = offload::par_offload(0..specs.len() as i64, &c).map_err(e)?;
    let mut native = native_population(specs);
    particles_par(&mut native, steps, dt);
    for (i, (p, o)) in native.iter().zip(&objs).enumerate() {
        let got: Vec<u32> = ["x", "y", "vx", "vy"]
            .iter()
            .map(|f| m.get_field::<f32>(o, f).map(f32::to_bits))
            .collect::<Result<_, _>>()
            .map_err(e)?;
        let want: Vec<u32> = p.state().iter().map(|v| v.to_bits()).collect();
        if got != want {
            return Err(format!(
                "particle {i} ({}): {got:?}, native {want:?}",
                specs[i].class
            ));
        }
    }
    Ok(rep)
}
