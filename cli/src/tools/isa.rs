//! `offload isa`: the bytecode's instructions as a table — operands, stack
//! effect (bottom of the stack first), what can make the instruction a deopt
//! site, and its one-line doc — all from the instruction table
//! (`offload_ir::isa`), so the reference cannot drift from what runs.

use offload::ir::Opcode;

/// The instructions whose mnemonic is `filter` or starts with it (`f32.`:
/// every `f32` instruction), every one without a filter, as a table; an
/// error naming the nearest instruction, or offload's name for a JVM
/// mnemonic, when none matches.
pub fn table(filter: Option<&str>) -> Result<String, String> {
    let rows: Vec<Opcode> = Opcode::ALL
        .iter()
        .copied()
        .filter(|op| filter.is_none_or(|f| op.mnemonic() == f || op.mnemonic().starts_with(f)))
        .collect();
    if rows.is_empty() {
        let f = filter.unwrap_or_default();
        let hint = match offload::ir::reference::jvm_equivalent(f) {
            Some(o) => format!(": the JVM's `{f}` is {o} in offload"),
            None => offload::ir::nearest(f, Opcode::ALL.iter().map(|o| o.mnemonic()))
                .map_or(String::new(), |n| format!(" (did you mean `{n}`?)")),
        };
        return Err(format!("error: no instruction `{f}`{hint}"));
    }
    let mut t = offload::table::new(["instruction", "operands", "stack", "may deopt", "does"]);
    for op in rows {
        let hz = op.hazards();
        t.add_row([
            op.mnemonic().to_string(),
            op.operand_names().join(" "),
            op.effect().to_string(),
            if hz.is_empty() {
                String::new()
            } else {
                hz.names().join(", ")
            },
            op.doc().to_string(),
        ]);
    }
    Ok(offload::table::text(&t))
}
