use super::*;

fn decls() -> Vec<(String, &'static str)> {
    let mut d = Vec::new();
    for i in 0..8 {
        d.push((format!("%r{i}"), ".b32"));
        d.push((format!("%p{i}"), ".pred"));
        d.push((format!("%f{i}"), ".f32"));
        d.push((format!("%rd{i}"), ".b64"));
    }
    d
}

fn opt(body: &str) -> String {
    optimize(body, &decls())
        .lines()
        .map(str::trim)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn copies_are_read_through_and_dead_copies_go() {
    let body = "\tmov.b32 %r1, %r0;\n\tmov.b32 %r2, %r1;\n\tadd.s32 %r3, %r2, 1;\n\tst.u32 [%r4], %r3;\n\tret;\n";
    assert_eq!(opt(body), "add.s32 %r3, %r0, 1;\nst.u32 [%r4], %r3;\nret;");
}

#[test]
fn a_copy_is_not_read_through_after_its_source_changes() {
    let body = "\tmov.b32 %r1, %r0;\n\tadd.s32 %r0, %r0, 1;\n\tst.u32 [%r4], %r1;\n\tst.u32 [%r4], %r0;\n\tret;\n";
    assert_eq!(
        opt(body),
        body.lines().map(str::trim).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn copies_between_types_stay() {
    let body = "\tmov.b32 %f1, %r0;\n\tst.f32 [%r4], %f1;\n\tret;\n";
    assert_eq!(opt(body), "mov.b32 %f1, %r0;\nst.f32 [%r4], %f1;\nret;");
}

#[test]
fn a_copy_available_on_one_path_only_is_not_used() {
    // %r1 is a copy of %r0 on the fall-through path, 7 on the other.
    let body = "\tmov.b32 %r1, 7;\n\t@%p0 bra $a;\n\tmov.b32 %r1, %r0;\n$a:\n\tst.u32 [%r4], %r1;\n\tret;\n";
    assert_eq!(
        opt(body),
        body.lines().map(str::trim).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn a_loop_keeps_the_value_its_back_edge_carries() {
    // %r1 = %r0 before the loop, but the loop changes %r1.
    let body = "\tmov.b32 %r1, %r0;\n$top:\n\tst.u32 [%r4], %r1;\n\tadd.s32 %r1, %r1, 1;\n\tsetp.lt.s32 %p0, %r1, 10;\n\t@%p0 bra $top;\n\tret;\n";
    assert_eq!(
        opt(body),
        body.lines().map(str::trim).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn effects_stay_and_guarded_writes_do_not_kill_liveness() {
    let body = "\tmov.b32 %r1, 1;\n\t@%p0 mov.b32 %r1, 2;\n\tatom.add.u32 %r2, [%r4], 1;\n\tld.relaxed.sys.u32 %r3, [%r4];\n\tld.u32 %r5, [%r4];\n\tst.u32 [%r4], %r1;\n\tret;\n";
    assert_eq!(
        opt(body),
        "mov.b32 %r1, 1;\n@%p0 mov.b32 %r1, 2;\natom.add.u32 %r2, [%r4], 1;\nld.relaxed.sys.u32 %r3, [%r4];\nst.u32 [%r4], %r1;\nret;"
    );
}

#[test]
fn branches_thread_invert_and_fall_through() {
    let body = "\t@%p0 bra $a;\n\tbra $b;\n$a:\n\tst.u32 [%r4], %r0;\n\tbra $c;\n$c:\n\tbra $d;\n$b:\n\tret;\n$d:\n\tst.u32 [%r4], %r1;\n\tret;\n";
    assert_eq!(
        opt(body),
        "@!%p0 bra $b;\nst.u32 [%r4], %r0;\nbra $d;\n$b:\nret;\n$d:\nst.u32 [%r4], %r1;\nret;"
    );
}

#[test]
fn calls_read_their_arguments_and_write_their_results() {
    let body = "\tmov.f32 %f1, %f0;\n\tcall (%f2), offload_f32_exp, (%f1);\n\tst.f32 [%r4], %f2;\n\tret;\n";
    assert_eq!(
        opt(body),
        "call (%f2), offload_f32_exp, (%f0);\nst.f32 [%r4], %f2;\nret;"
    );
}

#[test]
fn text_in_another_shape_is_kept() {
    let body = "\t{\n\t.reg .b32 %x;\n\t}\n";
    assert_eq!(optimize(body, &decls()), body);
}

#[test]
fn a_test_of_a_test_reads_the_first_test() {
    let body = "\tsetp.ge.s32 %p0, %r0, %r1;\n\tselp.b32 %r2, 1, 0, %p0;\n\tsetp.ne.u32 %p1, %r2, 0;\n\t@%p1 bra $out;\n\tst.u32 [%r4], %r0;\n$out:\n\tret;\n";
    assert_eq!(
        opt(body),
        "setp.ge.s32 %p0, %r0, %r1;\n@%p0 bra $out;\nst.u32 [%r4], %r0;\n$out:\nret;"
    );
    // `== 0` of the 0/1 value is the test negated.
    let body = body.replace("setp.ne.u32 %p1", "setp.eq.u32 %p1");
    assert_eq!(
        opt(&body),
        "setp.ge.s32 %p0, %r0, %r1;\n@!%p0 bra $out;\nst.u32 [%r4], %r0;\n$out:\nret;"
    );
}

#[test]
fn a_test_of_a_changed_test_stays() {
    let body = "\tsetp.ge.s32 %p0, %r0, %r1;\n\tselp.b32 %r2, 1, 0, %p0;\n\tsetp.lt.s32 %p0, %r0, 0;\n\tsetp.ne.u32 %p1, %r2, 0;\n\t@%p1 bra $out;\n\tst.u32 [%r4], %r0;\n\t@%p0 bra $out;\n\tst.u32 [%r4], %r1;\n$out:\n\tret;\n";
    assert_eq!(
        opt(body),
        body.lines().map(str::trim).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn constants_become_immediates_where_ptx_takes_them() {
    let body = "\tmov.f32 %f1, 0f40800000;\n\tsetp.gt.f32 %p0, %f0, %f1;\n\tmul.rn.f32 %f2, %f0, %f1;\n\tst.f32 [%r4], %f1;\n\t@%p0 st.f32 [%r4], %f2;\n\tret;\n";
    assert_eq!(
        opt(body),
        "mov.f32 %f1, 0f40800000;\nsetp.gt.f32 %p0, %f0, 0f40800000;\nmul.rn.f32 %f2, %f0, 0f40800000;\nst.f32 [%r4], %f1;\n@%p0 st.f32 [%r4], %f2;\nret;"
    );
    // A division takes an immediate dividend too (`1.0 / x`).
    let body =
        "\tmov.f32 %f1, 0f3F800000;\n\tdiv.rn.f32 %f2, %f1, %f0;\n\tst.f32 [%r4], %f2;\n\tret;\n";
    assert_eq!(
        opt(body),
        "div.rn.f32 %f2, 0f3F800000, %f0;\nst.f32 [%r4], %f2;\nret;"
    );
    // An integer constant in a float register is not read as a float.
    let body =
        "\tmov.b32 %f1, 1065353216;\n\tmul.rn.f32 %f2, %f0, %f1;\n\tst.f32 [%r4], %f2;\n\tret;\n";
    assert_eq!(
        opt(body),
        body.lines().map(str::trim).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn a_value_moved_into_its_variable_is_computed_there() {
    let body = "$top:\n\tadd.s32 %r1, %r0, 1;\n\tmul.lo.s32 %r2, %r1, 3;\n\tmov.b32 %r0, %r2;\n\tsetp.lt.s32 %p0, %r0, 10;\n\t@%p0 bra $top;\n\tst.u32 [%r4], %r0;\n\tret;\n";
    assert_eq!(
        opt(body),
        "$top:\nadd.s32 %r1, %r0, 1;\nmul.lo.s32 %r0, %r1, 3;\nsetp.lt.s32 %p0, %r0, 10;\n@%p0 bra $top;\nst.u32 [%r4], %r0;\nret;"
    );
    // Not when the variable is read between (the compare then reads the
    // copy's source).
    let body = "$top:\n\tmul.lo.s32 %r2, %r0, 3;\n\tst.u32 [%r4], %r0;\n\tmov.b32 %r0, %r2;\n\tsetp.lt.s32 %p0, %r0, 10;\n\t@%p0 bra $top;\n\tret;\n";
    assert_eq!(
        opt(body),
        "$top:\nmul.lo.s32 %r2, %r0, 3;\nst.u32 [%r4], %r0;\nmov.b32 %r0, %r2;\nsetp.lt.s32 %p0, %r2, 10;\n@%p0 bra $top;\nret;"
    );
}

#[test]
fn a_branch_to_a_branch_with_its_guard_goes_on_to_its_target() {
    let body = "\tld.relaxed.sys.u32 %r0, [%r4];\n\tsetp.ne.u32 %p0, %r0, 0;\n\t@!%p0 bra $back;\n\tst.u32 [%r4], %r1;\n$back:\n\t@!%p0 bra $top;\n\tret;\n$top:\n\tst.u32 [%r4], %r2;\n\tret;\n";
    assert_eq!(
        opt(body),
        "ld.relaxed.sys.u32 %r0, [%r4];\nsetp.ne.u32 %p0, %r0, 0;\n@!%p0 bra $top;\nst.u32 [%r4], %r1;\n@!%p0 bra $top;\nret;\n$top:\nst.u32 [%r4], %r2;\nret;"
    );
}

#[test]
fn a_repeated_computation_reads_the_first_result() {
    let body = "\tmul.lo.s32 %r1, %r0, 4;\n\tadd.s32 %r2, %r1, %r5;\n\tmul.lo.s32 %r3, %r0, 4;\n\tadd.s32 %r6, %r3, %r5;\n\tst.u32 [%r2], %r0;\n\tst.u32 [%r6], %r1;\n\tret;\n";
    assert_eq!(
        opt(body),
        "mul.lo.s32 %r1, %r0, 4;\nadd.s32 %r2, %r1, %r5;\nst.u32 [%r2], %r0;\nst.u32 [%r2], %r1;\nret;"
    );
}

#[test]
fn a_computation_on_a_changed_operand_or_a_load_is_repeated() {
    let body = "\tmul.lo.s32 %r1, %r0, 4;\n\tadd.s32 %r0, %r0, 1;\n\tmul.lo.s32 %r3, %r0, 4;\n\tld.u32 %r5, [%r4];\n\tst.u32 [%r4], %r1;\n\tld.u32 %r6, [%r4];\n\tst.u32 [%r4], %r3;\n\tst.u32 [%r4], %r5;\n\tst.u32 [%r4], %r6;\n\tret;\n";
    assert_eq!(
        opt(body),
        body.lines().map(str::trim).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn an_address_is_one_mad_and_the_product_dies() {
    // The element's address for a load and for a store (after CSE: one
    // product, two adds): two mads, no mul.
    let body = "\tmul.wide.u32 %rd0, %r0, 4;\n\tadd.u64 %rd1, %rd0, %rd5;\n\tld.f32 %f0, [%rd1];\n\tadd.u64 %rd2, %rd6, %rd0;\n\tst.f32 [%rd2], %f0;\n\tret;\n";
    assert_eq!(
        opt(body),
        "mad.wide.u32 %rd1, %r0, 4, %rd5;\nld.f32 %f0, [%rd1];\nmad.wide.u32 %rd2, %r0, 4, %rd6;\nst.f32 [%rd2], %f0;\nret;"
    );
}

#[test]
fn a_product_whose_factor_changed_is_not_fused() {
    let body = "\tmul.wide.u32 %rd0, %r0, 4;\n\tadd.s32 %r0, %r0, 1;\n\tadd.u64 %rd1, %rd0, %rd5;\n\tst.u32 [%rd1], %r0;\n\tret;\n";
    assert_eq!(
        opt(body),
        body.lines().map(str::trim).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn a_product_is_not_fused_across_blocks_or_into_float_adds() {
    let body = "\tmul.lo.u64 %rd0, %rd3, %rd4;\n$a:\n\tadd.u64 %rd1, %rd0, %rd5;\n\tst.u64 [%rd1], %rd0;\n\tadd.f32 %f1, %f0, %f2;\n\tst.f32 [%rd1], %f1;\n\tbra $a;\n";
    assert_eq!(
        opt(body),
        body.lines().map(str::trim).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn a_narrowing_of_a_narrow_value_is_a_copy() {
    let body =
        "\tcvt.u32.u64 %r1, %r0;\n\tmul.wide.u32 %rd0, %r1, 4;\n\tst.u64 [%rd5], %rd0;\n\tret;\n";
    assert_eq!(
        opt(body),
        "mul.wide.u32 %rd0, %r0, 4;\nst.u64 [%rd5], %rd0;\nret;"
    );
    // Narrowing twice is narrowing once.
    let twice =
        "\tcvt.u32.u64 %rd1, %rd0;\n\tcvt.u32.u64 %r1, %rd1;\n\tst.u32 [%rd5], %r1;\n\tret;\n";
    assert_eq!(
        opt(twice),
        "cvt.u32.u64 %r1, %rd0;\nst.u32 [%rd5], %r1;\nret;"
    );
    // A 64-bit source stays a conversion.
    let wide = "\tcvt.u32.u64 %r1, %rd1;\n\tst.u32 [%rd5], %r1;\n\tret;\n";
    assert_eq!(
        opt(wide),
        wide.lines().map(str::trim).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn a_load_repeated_with_no_write_between_is_loaded_once() {
    // The second load reads through a pure math call; the third follows a
    // store and stays.
    let body = "\tld.f32 %f0, [%rd1];\n\tcall (%f1), offload_f32_exp, (%f0);\n\tld.f32 %f2, [%rd1];\n\tadd.f32 %f3, %f1, %f2;\n\tst.f32 [%rd2], %f3;\n\tld.f32 %f4, [%rd1];\n\tst.f32 [%rd3], %f4;\n\tret;\n";
    assert_eq!(
        opt(body),
        "ld.f32 %f0, [%rd1];\ncall (%f1), offload_f32_exp, (%f0);\nadd.f32 %f3, %f1, %f0;\nst.f32 [%rd2], %f3;\nld.f32 %f4, [%rd1];\nst.f32 [%rd3], %f4;\nret;"
    );
    // An ordered load, or a call that may write, ends what is known.
    let strong = "\tld.f32 %f0, [%rd1];\n\tld.acquire.gpu.u32 %r0, [%rd4];\n\tld.f32 %f2, [%rd1];\n\tadd.f32 %f3, %f0, %f2;\n\tst.f32 [%rd2], %f3;\n\tst.u32 [%rd2], %r0;\n\tret;\n";
    assert_eq!(
        opt(strong),
        strong.lines().map(str::trim).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn a_diamond_of_two_computed_arms_is_one_arm_and_the_other_guarded() {
    let body = "\tsetp.lt.f32 %p0, %f0, 0f00000000;\n\t@!%p0 bra $U;\n\tsub.rn.f32 %f2, 0f3F800000, %f1;\n\tbra $L;\n$U:\n\tmov.f32 %f2, %f1;\n$L:\n\tst.f32 [%r4], %f2;\n\tret;\n";
    assert_eq!(
        opt(body),
        "setp.lt.f32 %p0, %f0, 0f00000000;\nmov.f32 %f2, %f1;\n@%p0 sub.rn.f32 %f2, 0f3F800000, %f1;\nst.f32 [%r4], %f2;\nret;"
    );
    // Not when the guarded arm reads what the other now writes first, nor
    // with a load in an arm.
    let body = "\tsetp.lt.f32 %p0, %f0, 0f00000000;\n\t@!%p0 bra $U;\n\tsub.rn.f32 %f2, 0f3F800000, %f2;\n\tbra $L;\n$U:\n\tmov.f32 %f2, %f1;\n$L:\n\tst.f32 [%r4], %f2;\n\tret;\n";
    assert!(opt(body).contains("bra"), "{}", opt(body));
    let body = "\tsetp.lt.f32 %p0, %f0, 0f00000000;\n\t@!%p0 bra $U;\n\tsub.rn.f32 %f2, 0f3F800000, %f1;\n\tbra $L;\n$U:\n\tld.f32 %f2, [%r4];\n$L:\n\tst.f32 [%r4], %f2;\n\tret;\n";
    assert!(opt(body).contains("bra"), "{}", opt(body));
}

#[test]
fn an_instructions_note_stays_with_it_and_the_body_is_still_cleaned() {
    // The copy is read through (the body parsed despite the notes), and
    // each note follows its instruction: the load keeps its own, the
    // guarded load its own.
    let body = "\tmov.b32 %r1, %r0;\n\tld.global.u32 %r2, [%rd1]; // @count dispatch.page\n\tsetp.lt.s32 %p1, %r2, 0;\n\t@%p1 ld.u32 %r2, [%rd2]; // @count dispatch.header\n\tadd.s32 %r3, %r2, %r1;\n\tst.u32 [%rd3], %r3;\n\tret;\n";
    assert_eq!(
        opt(body),
        "ld.global.u32 %r2, [%rd1]; // @count dispatch.page\nsetp.lt.s32 %p1, %r2, 0;\n@%p1 ld.u32 %r2, [%rd2]; // @count dispatch.header\nadd.s32 %r3, %r2, %r0;\nst.u32 [%rd3], %r3;\nret;"
    );
}

#[test]
fn a_vector_mov_writes_and_reads_its_parts_and_the_rest_is_cleaned() {
    // The unpacked halves are read by the pack; the copy before the
    // unpack is read through; an unused unpack goes; a branch to the next
    // line goes. Any other brace leaves the body alone.
    let body = "\tmov.b64 %rd1, %rd0;\n\tmov.b64 {%r0, %r1}, %rd1;\n\tmov.b64 {%r2, %r3}, %rd1;\n\tmov.b64 %rd2, {%r1, %r0};\n\tbra $a;\n$a:\n\tst.u64 [%rd4], %rd2;\n\tret;\n";
    assert_eq!(
        opt(body),
        "mov.b64 {%r0, %r1}, %rd0;\nmov.b64 %rd2, {%r1, %r0};\nst.u64 [%rd4], %rd2;\nret;"
    );
    let other = "\tbra $a;\n$a:\n\t{ ret; }\n";
    assert_eq!(
        opt(other),
        other.lines().map(str::trim).collect::<Vec<_>>().join("\n")
    );
}
