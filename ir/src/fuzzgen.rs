//! Random valid modules.
