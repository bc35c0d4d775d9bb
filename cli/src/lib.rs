//! `offload-cli`: the `offload` command (`cli/src/main.rs`: the REPL and
//! script runner, `check`, `fmt`, `analyze`, `ptx`, `demo`, `bench`,
//! `experiment`) and its tooling ([`tools`]), kept out of the `offload`
//! library so that a program using the library depends only on what a
//! runtime needs.

pub mod tools;
