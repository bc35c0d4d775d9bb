//! The math the CPU backend calls instead of inlining: the same functions
//! the interpreter uses ([`offload_ir::semantics`]), exported with the C ABI.

use offload_ir::semantics as sem;

macro_rules! exports {
    ($($name:ident($($a:ident: $t:ty),*) -> $r:ty = $e:expr;)*) => {
        $(
            /// Exported for compiled code.
            pub extern "C" fn $name($($a: $t),*) -> $r {
                $e
            }
        )*

        /// `(symbol, address)` of every export, for the JIT's symbol table.
        pub fn symbols() -> Vec<(&'static str, *const u8)> {
            vec![$((stringify!($name), $name as *const u8)),*]
        }
    };
}

exports! {
    offload_f32_rem(a: f32, b: f32) -> f32 = a % b;
    offload_f64_rem(a: f64, b: f64) -> f64 = a % b;
    offload_f32_exp(a: f32) -> f32 = sem::f32_exp(a);
    offload_f64_exp(a: f64) -> f64 = sem::f64_exp(a);
    offload_f32_log(a: f32) -> f32 = sem::f32_log(a);
    offload_f64_log(a: f64) -> f64 = sem::f64_log(a);
    offload_f32_sin(a: f32) -> f32 = sem::f32_sin(a);
    offload_f64_sin(a: f64) -> f64 = sem::f64_sin(a);
    offload_f32_cos(a: f32) -> f32 = sem::f32_cos(a);
    offload_f64_cos(a: f64) -> f64 = sem::f64_cos(a);
    offload_f32_pow(a: f32, b: f32) -> f32 = sem::f32_pow(a, b);
    offload_f64_pow(a: f64, b: f64) -> f64 = sem::f64_pow(a, b);
    offload_f32_fma(a: f32, b: f32, c: f32) -> f32 = sem::f32_fma(a, b, c);
    offload_f64_fma(a: f64, b: f64, c: f64) -> f64 = sem::f64_fma(a, b, c);
}
