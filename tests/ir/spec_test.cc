// OpSpec text, validation, hashing and estimates for every op kind.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "ir/op_spec.h"
#include "tests/harness/example_specs.h"

namespace jit {
namespace {

using test::valid_examples;

OpSpec parse_ok(const std::string& text) {
  Result<OpSpec> r = parse_spec(text);
  EXPECT_TRUE(r.is_ok()) << text << ": " << r.status().to_string();
  return r.is_ok() ? r.value() : OpSpec{};
}

TEST(SpecText, EveryOpHasValidExamplesThatRoundTrip) {
  const auto& examples = valid_examples();
  for (OpKind op : all_op_kinds()) {
    const std::string name(op_name(op));
    const auto it = examples.find(name);
    ASSERT_NE(it, examples.end()) << "no valid example spec for op " << name;
    ASSERT_FALSE(it->second.empty()) << name;
    for (const std::string& text : it->second) {
      SCOPED_TRACE(text);
      const Result<OpSpec> parsed = parse_spec(text);
      ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
      const OpSpec& spec = parsed.value();
      EXPECT_EQ(spec.op, op);
      EXPECT_TRUE(validate(spec).is_ok());
      // Canonical text: every field, declared order, no spaces; re-printing is identical.
      const std::string canonical = to_string(spec);
      EXPECT_EQ(canonical.find(' '), std::string::npos) << canonical;
      EXPECT_EQ(canonical.rfind(name + "(", 0), 0u) << canonical;
      const OpSpec again = parse_ok(canonical);
      EXPECT_EQ(again, spec) << canonical;
      EXPECT_EQ(to_string(again), canonical);
    }
  }
  // No stale examples for ops that do not exist.
  for (const auto& [name, texts] : examples) EXPECT_TRUE(parse_op_kind(name)) << name;
}

TEST(SpecText, CanonicalFormIsExact) {
  EXPECT_EQ(to_string(parse_ok("rms_norm( hidden = 4096 , dtype = bfloat16 )")),
            "rms_norm(dtype=bf16,hidden=4096,weight=true)");
  EXPECT_EQ(to_string(parse_ok("convert_fp8(src=float32,dst=float8_e4m3fn)")),
            "convert_fp8(dst=fp8_e4m3,src=f32)");
  EXPECT_EQ(to_string(parse_ok("paged_attention_v2(dtype=f16,kv=fp8_e4m3,head_size=64,"
                               "block_size=16,heads_q=8,heads_kv=8,partition_size=512)")),
            "paged_attention_v2(dtype=f16,kv=fp8_e4m3,head_size=64,block_size=16,heads_q=8,"
            "heads_kv=8,alibi=false,blocksparse=false,partition_size=512)");
  EXPECT_EQ(to_string(parse_ok("cpu_attention_with_kv_cache(isa=vec16,head_size=80,"
                               "block_size=48,heads_q=9,heads_kv=3,softcap=1)")),
            "cpu_attention_with_kv_cache(isa=vec16,dtype=bf16,head_size=80,block_size=48,"
            "heads_q=9,heads_kv=3,causal=true,sliding_window=false,alibi=false,softcap=true,"
            "sinks=false)");
  // vec / vec16 accept head sizes off vLLM's list (any D: the slab formulas hold for all).
  for (const char* text :
       {"cpu_attention_with_kv_cache(isa=vec,head_size=57,block_size=32,heads_q=8,heads_kv=2)",
        "cpu_attention_with_kv_cache(isa=vec16,head_size=40,block_size=16,heads_q=8,heads_kv=1)",
        "cpu_attn_reshape_and_cache(isa=vec,dtype=f32,heads_kv=2,head_size=1,block_size=32)",
        "cpu_attn_get_scheduler_metadata(isa=vec16,head_size=100,heads_q=4,heads_kv=4)"}) {
    EXPECT_TRUE(validate(parse_ok(text)).is_ok()) << text;
  }
  // The CPU-attention kv field (fp8 KV caches, spec §3.6) prints only when not auto, so the
  // specs written before it keep their text and hashes; an explicit kv=auto canonicalises away.
  EXPECT_EQ(to_string(parse_ok("cpu_attention_with_kv_cache(isa=vec,kv=fp8_e5m2,head_size=64,"
                               "block_size=32,heads_q=8,heads_kv=2)")),
            "cpu_attention_with_kv_cache(isa=vec,dtype=bf16,head_size=64,block_size=32,"
            "heads_q=8,heads_kv=2,causal=true,sliding_window=false,alibi=false,softcap=false,"
            "sinks=false,kv=fp8_e5m2)");
  EXPECT_EQ(to_string(parse_ok("cpu_attn_reshape_and_cache(isa=vec,dtype=f16,heads_kv=2,"
                               "head_size=64,block_size=32,kv=auto)")),
            "cpu_attn_reshape_and_cache(isa=vec,dtype=f16,heads_kv=2,head_size=64,block_size=32)");
  EXPECT_EQ(to_string(parse_ok("cpu_attn_reshape_and_cache(isa=amx,dtype=bf16,heads_kv=2,"
                               "head_size=64,block_size=32,kv=fp8_e4m3)")),
            "cpu_attn_reshape_and_cache(isa=amx,dtype=bf16,heads_kv=2,head_size=64,block_size=32,"
            "kv=fp8_e4m3)");
  // A boolean written as 0/1 prints as false/true.
  EXPECT_EQ(parse_ok("rms_norm(dtype=bf16,hidden=8,weight=0)"),
            parse_ok("rms_norm(dtype=bf16,hidden=8,weight=false)"));
}

TEST(SpecText, DefaultsOfEveryOpPrintAndCarryTheirFamily) {
  for (OpKind op : all_op_kinds()) {
    const OpSpec spec = OpSpec::defaults(op);
    EXPECT_EQ(spec.op, op);
    const std::string text = to_string(spec);
    EXPECT_EQ(text.rfind(std::string(op_name(op)) + "(", 0), 0u) << text;
    EXPECT_FALSE(op_family(op).empty());
  }
}

TEST(SpecValidate, WrongFamilyIsAnInternalError) {
  OpSpec spec = OpSpec::defaults(OpKind::kSwapBlocks);
  spec.params = ir::NormParams{DType::kBF16, 8, true};
  const Status s = validate(spec);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("swap_blocks"), std::string::npos) << s.message();
}

struct InvalidCase {
  const char* text;
  const char* expected;  // a substring of the message naming the offending field
};

// Every rejection: malformed text, then one rule of every family's validate().
const InvalidCase kInvalid[] = {
    // Malformed text.
    {"rms_norm", "expected the form op(field=value"},
    {"rms_norm(dtype=bf16,hidden=4096", "expected the form op(field=value"},
    {"", "expected the form op(field=value"},
    {"(dtype=bf16)", "unknown op ''"},
    {"rms_norms(dtype=bf16,hidden=4096)", "unknown op 'rms_norms'"},
    {"rms_norm(dtype=bf16,hiden=4096)", "has no field 'hiden'"},
    {"rms_norm(dtype=bf16,hidden=4096,hidden=8)", "field 'hidden' is given twice"},
    {"rms_norm(dtype=bf16,hidden=4k)", "field 'hidden' has value '4k'"},
    {"rms_norm(dtype=bf16,hidden=99999999999999999999)", "field 'hidden' has value"},
    {"rms_norm(dtype=bf16,hidden=)", "field 'hidden' has value ''"},
    {"rms_norm(dtype=bfloat17,hidden=4096)", "field 'dtype' has value 'bfloat17'"},
    {"rms_norm(dtype=bf16 hidden=8)", "field 'dtype' has value 'bf16 hidden=8'"},
    {"rms_norm(dtype=bf16,hidden=8,weight=maybe)", "field 'weight' has value 'maybe'"},
    {"rms_norm(dtype=bf16,,hidden=8)", "is not of the form field=value"},
    {"rms_norm(dtype)", "'dtype' is not of the form field=value"},
    {"reshape_and_cache_flash(dtype=bf16,heads_kv=8,head_size=64,block_size=16,layout=nchw)",
     "field 'layout' has value 'nchw'"},
    {"reshape_and_cache(dtype=bf16,kv=fp8,heads_kv=8,head_size=64,block_size=16)",
     "field 'kv' has value 'fp8'"},
    {"reshape_and_cache(dtype=bf16,heads=8,head_size=64,block_size=16)", "has no field 'heads'"},
    // norm, rope, activation.
    {"rms_norm(dtype=i8,hidden=8)", "dtype=i8 is not supported"},
    {"rms_norm(dtype=bf16,hidden=0)", "hidden=0 is out of range"},
    {"silu_and_mul(dtype=bf16,d=-1)", "d=-1 is out of range"},
    {"rotary_embedding(dtype=bf16,cache_dtype=bf16,head_size=128,rot_dim=63,heads_q=8,"
     "heads_kv=8)",
     "rot_dim=63 must be even"},
    // cache family.
    {"swap_blocks(block_bytes=0)", "block_bytes=0 is out of range"},
    {"swap_blocks(block_bytes=4294967296)", "block_bytes=4294967296 is out of range"},
    {"reshape_and_cache(dtype=bf16,kv=fp8_e4m3,heads_kv=8,head_size=72,block_size=16)",
     "head_size=72 must be a multiple of 16 for fp8 caches (x = 16"},
    {"reshape_and_cache(dtype=f32,kv=auto,heads_kv=8,head_size=6,block_size=16)",
     "head_size=6 must be a multiple of 4 for f32 caches"},
    {"reshape_and_cache(dtype=i32,heads_kv=8,head_size=64,block_size=16)",
     "dtype=i32 is not supported"},
    {"reshape_and_cache(dtype=bf16,kv=fp8_ds_mla,heads_kv=8,head_size=64,block_size=16)",
     "kv=fp8_ds_mla is not supported"},
    {"reshape_and_cache(dtype=bf16,heads_kv=8,head_size=64,block_size=0)",
     "block_size=0 is out of range"},
    {"reshape_and_cache(dtype=bf16,heads_kv=0,head_size=64,block_size=16)",
     "heads_kv=0 is out of range"},
    {"reshape_and_cache_flash(dtype=bf16,kv=auto,heads_kv=8,head_size=64,block_size=16,"
     "per_head_scale=true)",
     "per_head_scale=true requires kv=fp8_e4m3 or fp8_e5m2"},
    {"reshape_and_cache_flash(dtype=f32,heads_kv=4096,head_size=4096,block_size=65536)",
     "block_size=65536 makes one cache block"},
    {"concat_and_cache_mla(dtype=bf16,kv=fp8_ds_mla,kv_lora_rank=256,pe_dim=64,block_size=16)",
     "kv=fp8_ds_mla requires kv_lora_rank=512 and pe_dim=64"},
    {"concat_and_cache_mla(dtype=f32,kv=fp8_ds_mla,kv_lora_rank=512,pe_dim=64,block_size=16)",
     "dtype=f32 is not supported with kv=fp8_ds_mla"},
    {"concat_and_cache_mla(dtype=bf16,kv_lora_rank=512,pe_dim=0,block_size=16)",
     "pe_dim=0 is out of range"},
    {"concat_and_cache_mla_rope_fused(dtype=bf16,kv=fp8_ds_mla,kv_lora_rank=512,rot_dim=64,"
     "heads_q=16,block_size=64)",
     "kv=fp8_ds_mla is not supported by the rope-fused op"},
    {"concat_and_cache_mla_rope_fused(dtype=bf16,kv_lora_rank=512,rot_dim=65,heads_q=16,"
     "block_size=64)",
     "rot_dim=65 must be even"},
    {"concat_and_cache_mla_rope_fused(dtype=bf16,kv_lora_rank=512,rot_dim=64,heads_q=0,"
     "block_size=64)",
     "heads_q=0 is out of range"},
    {"rotary_embedding_and_cache_flash(dtype=bf16,heads_q=8,heads_kv=2,head_size=64,rot_dim=65,"
     "block_size=16)",
     "rot_dim=65 is out of range"},
    {"rotary_embedding_and_cache_flash(dtype=bf16,heads_q=8,heads_kv=2,head_size=64,rot_dim=33,"
     "block_size=16)",
     "rot_dim=33 must be even"},
    {"rotary_embedding_and_cache_flash(dtype=bf16,heads_q=8,heads_kv=3,head_size=64,rot_dim=64,"
     "block_size=16)",
     "heads_q=8 must be a multiple of heads_kv=3"},
    {"rotary_embedding_and_cache_flash(dtype=bf16,kv=fp8_ds_mla,heads_q=8,heads_kv=2,"
     "head_size=64,rot_dim=64,block_size=16)",
     "fp8_ds_mla"},
    {"rotary_embedding_and_cache_flash(dtype=bf16,heads_q=8,heads_kv=2,head_size=64,rot_dim=64,"
     "block_size=16,per_head_scale=true)",
     "per_head_scale=true requires kv=fp8_e4m3 or fp8_e5m2"},
    {"rotary_embedding_and_cache_flash(dtype=i32,heads_q=8,heads_kv=2,head_size=64,rot_dim=64,"
     "block_size=16)",
     "dtype=i32 is not supported"},
    {"convert_fp8(dst=fp8_e5m2,src=bf16)", "dst=fp8_e5m2 is not supported"},
    {"convert_fp8(dst=u8,src=bf16)", "dst=u8 is not supported"},
    {"convert_fp8(dst=bf16,src=f32)", "dst=bf16 is not supported"},
    {"convert_fp8(dst=i8,src=fp8_e4m3)", "dst=i8 is not supported"},
    {"convert_fp8(dst=f32,src=i8)", "src=i8 is not supported"},
    {"gather_and_maybe_dequant_cache(dtype=bf16,head_dim=0,block_size=16)",
     "head_dim=0 is out of range"},
    {"gather_and_maybe_dequant_cache(dtype=bf16,kv=fp8_ds_mla,head_dim=576,block_size=16)",
     "kv=fp8_ds_mla is not supported"},
    {"gather_and_maybe_dequant_cache(dtype=u8,head_dim=576,block_size=16)",
     "dtype=u8 is not supported"},
    {"cp_gather_cache(dtype=i64,entry_size=576,block_size=16)", "dtype=i64 is not supported"},
    {"cp_gather_cache(dtype=f32,entry_size=0,block_size=16)", "entry_size=0 is out of range"},
    {"cp_gather_and_upconvert_fp8_kv_cache(block_size=0)", "block_size=0 is out of range"},
    {"indexer_k_quant_and_cache(dtype=bf16,head_dim=128,quant_block=96,block_size=64)",
     "quant_block=96 must divide head_dim=128"},
    {"indexer_k_quant_and_cache(dtype=f32,head_dim=128,quant_block=128,block_size=64)",
     "dtype=f32 is not supported"},
    {"indexer_k_quant_and_cache(dtype=bf16,head_dim=128,block_size=64,scale_fmt=e8m0)",
     "field 'scale_fmt' has value 'e8m0'"},
    {"cp_gather_indexer_k_quant_cache(head_dim=128,quant_block=0,block_size=64)",
     "quant_block=0 is out of range"},
    {"cp_gather_indexer_k_quant_cache(head_dim=128,quant_block=256,block_size=64)",
     "quant_block=256 is out of range"},
    // attention family.
    {"paged_attention_v1(dtype=bf16,head_size=128,block_size=16,heads_q=40,heads_kv=16)",
     "heads_q=40 must be a multiple of heads_kv=16"},
    {"paged_attention_v1(dtype=bf16,head_size=128,block_size=16,heads_q=8,heads_kv=16)",
     "heads_kv=16 is out of range"},
    {"paged_attention_v1(dtype=bf16,head_size=128,block_size=16,heads_q=0,heads_kv=0)",
     "heads_q=0 is out of range"},
    {"paged_attention_v1(dtype=bf16,head_size=128,block_size=16,heads_q=8,heads_kv=8,"
     "partition_size=512)",
     "partition_size=512 must be 0 for paged_attention_v1"},
    {"paged_attention_v2(dtype=bf16,head_size=128,block_size=16,heads_q=8,heads_kv=8,"
     "partition_size=500)",
     "partition_size=500 must be a multiple of block_size=16"},
    {"paged_attention_v2(dtype=bf16,head_size=128,block_size=16,heads_q=8,heads_kv=8)",
     "partition_size=0 is out of range"},
    {"paged_attention_v1(dtype=f16,kv=fp8_e4m3,head_size=72,block_size=16,heads_q=8,"
     "heads_kv=8)",
     "head_size=72 must be a multiple of 16 for fp8 caches (x = 16"},
    {"paged_attention_v1(dtype=bf16,kv=auto,head_size=20,block_size=16,heads_q=8,heads_kv=8)",
     "head_size=20 must be a multiple of 8 for bf16 caches"},
    {"paged_attention_v1(dtype=bf16,head_size=0,block_size=16,heads_q=8,heads_kv=8)",
     "head_size=0 is out of range"},
    {"merge_attn_states(dtype=bf16,out_dtype=f16,heads=8,head_size=128)",
     "out_dtype=f16 is not supported for dtype=bf16"},
    {"merge_attn_states(dtype=bf16,out_dtype=fp8_e5m2,heads=8,head_size=128)",
     "out_dtype=fp8_e5m2 is not supported"},
    {"merge_attn_states(dtype=bf16,out_dtype=bf16,heads=0,head_size=128)",
     "heads=0 is out of range"},
    {"convert_vertical_slash_indexes(block_m=64,block_n=128)", "block_n=128 must equal block_m=64"},
    {"convert_vertical_slash_indexes_mergehead(block_m=0,block_n=0)", "block_m=0 is out of range"},
    {"top_k_per_row_prefill(top_k=0)", "top_k=0 is out of range"},
    {"top_k_per_row_decode(top_k=abc)", "field 'top_k' has value 'abc'"},
    // CPU attention and GEMM.
    {"cpu_attn_get_scheduler_metadata(isa=amx,dtype=f16,head_size=128,heads_q=8,heads_kv=2)",
     "dtype=f16 is not supported with isa=amx"},
    // vec / vec16 take any head size (their slab formulas hold for every D); amx and neon not.
    {"cpu_attn_get_scheduler_metadata(isa=amx,dtype=bf16,head_size=48,heads_q=8,heads_kv=2)",
     "head_size=48 must be a multiple of 32 for isa=amx"},
    {"cpu_attn_reshape_and_cache(isa=neon,dtype=bf16,heads_kv=2,head_size=72,"
     "block_size=32)",
     "head_size=72 must be a multiple of 32 for isa=neon"},
    {"cpu_attention_with_kv_cache(isa=vec16,dtype=bf16,head_size=4097,block_size=16,heads_q=8,"
     "heads_kv=2)",
     "head_size=4097 is out of range"},
    {"cpu_attention_with_kv_cache(isa=vec,dtype=bf16,head_size=128,block_size=48,heads_q=8,"
     "heads_kv=2)",
     "block_size=48 must be a multiple of 32 for isa=vec"},
    {"cpu_attention_with_kv_cache(isa=avx9,dtype=bf16,head_size=128,block_size=32,heads_q=8,"
     "heads_kv=2)",
     "field 'isa' has value 'avx9'"},
    {"cpu_attention_with_kv_cache(isa=vec,dtype=bf16,head_size=128,block_size=32,heads_q=9,"
     "heads_kv=2)",
     "heads_q=9 must be a multiple of heads_kv=2"},
    // fp8 KV caches: isa=vec and amx only (spec §3.6); fp8_ds_mla is an MLA layout.
    {"cpu_attention_with_kv_cache(isa=vec16,dtype=bf16,head_size=80,block_size=16,heads_q=8,"
     "heads_kv=2,kv=fp8_e4m3)",
     "kv=fp8_e4m3 is not supported with isa=vec16"},
    {"cpu_attention_with_kv_cache(isa=neon,dtype=bf16,head_size=64,block_size=32,heads_q=8,"
     "heads_kv=2,kv=fp8_e5m2)",
     "kv=fp8_e5m2 is not supported with isa=neon"},
    {"cpu_attn_reshape_and_cache(isa=vec,dtype=bf16,heads_kv=2,head_size=64,block_size=32,"
     "kv=fp8_ds_mla)",
     "kv=fp8_ds_mla is not supported"},
    {"cpu_attn_reshape_and_cache(isa=vec,dtype=bf16,heads_kv=2,head_size=64,block_size=32,"
     "kv=fp9)",
     "field 'kv' has value 'fp9'"},
    {"create_onednn_mm(dtype=bf16,k=0,n=16)", "k=0 is out of range"},
    {"onednn_mm(dtype=i8,k=16,n=16)", "dtype=i8 is not supported"},
    {"create_onednn_scaled_mm(out_dtype=i32,k=16,n=16)", "out_dtype=i32 is not supported"},
    {"onednn_scaled_mm(out_dtype=bf16,k=16,n=-5)", "n=-5 is out of range"},
};

TEST(SpecErrors, EveryInvalidSpecIsRejectedNamingTheField) {
  EXPECT_GE(std::size(kInvalid), 40u);
  for (const InvalidCase& c : kInvalid) {
    SCOPED_TRACE(c.text);
    const Result<OpSpec> r = parse_spec(c.text);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos)
        << "message: " << r.status().message() << "\nexpected to contain: " << c.expected;
  }
}

TEST(SpecErrors, ValidationMessagesNameTheOp) {
  const Result<OpSpec> r = parse_spec("top_k_per_row_decode(top_k=0)");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message().rfind("top_k_per_row_decode: ", 0), 0u) << r.status().message();
}

// ---- hashes

TEST(SpecHash, GoldenValuesAreStable) {
  // Pinned: a change means every cache key changes; bump the IR version deliberately.
  struct Golden {
    const char* text;
    uint64_t h64;
    const char* h128;
  };
  const Golden golden[] = {
      {"rms_norm(dtype=bf16,hidden=4096,weight=true)", 0xd3e8f76fb96ab207ULL,
       "2824ab584554a9dc240ba9c167e1f2ae"},
      {"reshape_and_cache_flash(dtype=bf16,kv=fp8_e4m3,heads_kv=8,head_size=128,block_size=16,"
       "layout=hnd,per_head_scale=true)",
       0x1ced79f78416d75aULL, "1ef0799150608c759e442c32196c8423"},
      {"paged_attention_v2(dtype=f16,kv=auto,head_size=128,block_size=16,heads_q=64,"
       "heads_kv=8,alibi=false,blocksparse=false,partition_size=512)",
       0x5d5426e210604b09ULL, "be949f0e62fa6f6814fbc6d07fe1da91"},
  };
  for (const Golden& g : golden) {
    SCOPED_TRACE(g.text);
    const OpSpec spec = parse_ok(g.text);
    EXPECT_EQ(hash64(spec), g.h64) << std::hex << "0x" << hash64(spec);
    EXPECT_EQ(hash128(spec).hex(), g.h128);
  }
}

TEST(SpecHash, DistinctSpecsHaveDistinctHashesAndEqualSpecsEqualHashes) {
  std::set<uint64_t> seen64;
  std::set<std::string> seen128;
  std::set<std::string> texts;
  for (const auto& [name, examples] : valid_examples()) {
    for (const std::string& text : examples) {
      const OpSpec spec = parse_ok(text);
      if (!texts.insert(to_string(spec)).second) continue;  // same spec spelled twice
      EXPECT_TRUE(seen64.insert(hash64(spec)).second) << text;
      EXPECT_TRUE(seen128.insert(hash128(spec).hex()).second) << text;
      const OpSpec copy = parse_ok(to_string(spec));
      EXPECT_EQ(hash64(copy), hash64(spec));
      EXPECT_EQ(hash128(copy), hash128(spec));
      EXPECT_EQ(OpSpecHash{}(copy), OpSpecHash{}(spec));
    }
  }
  // Same fields, different op of the same family.
  EXPECT_NE(hash64(parse_ok("top_k_per_row_prefill(top_k=2048)")),
            hash64(parse_ok("top_k_per_row_decode(top_k=2048)")));
  EXPECT_NE(hash64(parse_ok("onednn_mm(dtype=bf16,k=128,n=256)")),
            hash64(parse_ok("onednn_mm(dtype=bf16,k=256,n=128)")));
  // The CPU-attention kv field: kv=auto hashes as the spec without the field, fp8 differs.
  const char* attn =
      "cpu_attention_with_kv_cache(isa=vec,dtype=bf16,head_size=64,block_size=32,"
      "heads_q=8,heads_kv=2";
  const OpSpec plain = parse_ok(std::string(attn) + ")");
  EXPECT_EQ(hash128(parse_ok(std::string(attn) + ",kv=auto)")), hash128(plain));
  EXPECT_NE(hash128(parse_ok(std::string(attn) + ",kv=fp8_e4m3)")), hash128(plain));
  EXPECT_NE(hash128(parse_ok(std::string(attn) + ",kv=fp8_e4m3)")),
            hash128(parse_ok(std::string(attn) + ",kv=fp8_e5m2)")));
  // Differently spelled, equal specs.
  const OpSpec a = parse_ok("rms_norm(dtype=bfloat16,hidden=4096)");
  const OpSpec b = parse_ok("rms_norm( weight=1, hidden=4096, dtype=bf16 )");
  EXPECT_EQ(a, b);
  EXPECT_EQ(hash64(a), hash64(b));
  EXPECT_EQ(hash128(a), hash128(b));
  EXPECT_EQ(hash128(a).hex().size(), 32u);
}

// ---- estimates, computed by hand

Estimate estimate_of(const std::string& text, ProblemSize size) {
  return estimates(parse_ok(text), size);
}

TEST(SpecEstimate, KnownValues) {
  // rms_norm: 2 rows of 4096 bf16 read and written + the weight; 4 flops per element.
  Estimate e = estimate_of("rms_norm(dtype=bf16,hidden=4096)", {.tokens = 2});
  EXPECT_DOUBLE_EQ(e.bytes, 2 * 2 * 8192 + 8192);
  EXPECT_DOUBLE_EQ(e.flops, 4 * 4096 * 2);

  // swap_blocks: 3 pairs x (read + write 1024 bytes + two int64 ids).
  e = estimate_of("swap_blocks(block_bytes=1024)", {.tokens = 3});
  EXPECT_DOUBLE_EQ(e.bytes, 3 * (2 * 1024 + 16));
  EXPECT_DOUBLE_EQ(e.flops, 0);

  // reshape_and_cache, bf16 -> fp8: 10 tokens x 8 heads x 128 = 10240 elements per tensor;
  // key+value read (2 B) and written (1 B), 10 int64 slots, two fp32 scales.
  e = estimate_of(
      "reshape_and_cache(dtype=bf16,kv=fp8_e4m3,heads_kv=8,head_size=128,block_size=16)",
      {.tokens = 10});
  EXPECT_DOUBLE_EQ(e.bytes, 2 * 10240 * 3 + 80 + 8);
  EXPECT_DOUBLE_EQ(e.flops, 2 * 10240);

  // convert_fp8: 1000 elements, 4 bytes in, 1 out, one operation each.
  e = estimate_of("convert_fp8(dst=fp8_e4m3,src=f32)", {.tokens = 1000});
  EXPECT_DOUBLE_EQ(e.bytes, 5000);
  EXPECT_DOUBLE_EQ(e.flops, 1000);

  // paged_attention_v1: 2 sequences of 100 tokens, 8 kv heads of 128 bf16 for K and V,
  // query + out of 64 heads, ceil(100/16) = 7 block-table entries each, 2 seq_lens.
  const char* v1 =
      "paged_attention_v1(dtype=bf16,kv=auto,head_size=128,block_size=16,heads_q=64,heads_kv=8)";
  e = estimate_of(v1, {.batch = 2, .context = 100});
  EXPECT_DOUBLE_EQ(e.bytes, 2.0 * 100 * 8 * 128 * 2 * 2 + 2.0 * 2 * 64 * 128 * 2 + 2 * 4 * 7 + 8);
  EXPECT_DOUBLE_EQ(e.flops, 4.0 * 2 * 64 * 100 * 128);

  // paged_attention_v2 with 1000 tokens: 63 block-table entries, 2 partitions whose
  // exp_sums/max_logits (8 B) and tmp_out (128 x 2 B) are written and read back.
  e = estimate_of(
      "paged_attention_v2(dtype=bf16,kv=auto,head_size=128,block_size=16,heads_q=64,"
      "heads_kv=8,partition_size=512)",
      {.batch = 2, .context = 1000});
  EXPECT_DOUBLE_EQ(
      e.bytes, 2.0 * 1000 * 8 * 128 * 4 + 65536 + 2 * 4 * 63 + 8 + 2.0 * 2 * 64 * 2 * (8 + 256));
  EXPECT_DOUBLE_EQ(e.flops, 4.0 * 2 * 64 * 1000 * 128);

  // merge_attn_states: 2 tokens x 4 heads of 8 f32: two inputs + output, two LSEs in, one out.
  e = estimate_of("merge_attn_states(dtype=f32,out_dtype=f32,heads=4,head_size=8,output_lse=true)",
                  {.tokens = 2});
  EXPECT_DOUBLE_EQ(e.bytes, 8 * 8 * 12 + 8 * 8 + 8 * 4);
  EXPECT_DOUBLE_EQ(e.flops, 3 * 8 * 8);

  // Causal CPU attention: one request, 4 queries over 10 keys attend 10+9+8+7 = 34 pairs.
  e = estimate_of(
      "cpu_attention_with_kv_cache(isa=vec,dtype=bf16,head_size=128,block_size=32,heads_q=8,"
      "heads_kv=2)",
      {.tokens = 4, .batch = 1, .context = 10});
  EXPECT_DOUBLE_EQ(e.flops, 4.0 * 34 * 8 * 128);
  EXPECT_DOUBLE_EQ(e.bytes, 10.0 * 2 * 128 * 2 * 2 + 2.0 * 4 * 8 * 128 * 2 + 4 + 12);
  // fp8 KV: the cache bytes are one per element, the query/output stay bf16.
  e = estimate_of(
      "cpu_attention_with_kv_cache(isa=vec,dtype=bf16,head_size=128,block_size=32,heads_q=8,"
      "heads_kv=2,kv=fp8_e4m3)",
      {.tokens = 4, .batch = 1, .context = 10});
  EXPECT_DOUBLE_EQ(e.flops, 4.0 * 34 * 8 * 128);
  EXPECT_DOUBLE_EQ(e.bytes, 10.0 * 2 * 128 * 2 * 1 + 2.0 * 4 * 8 * 128 * 2 + 4 + 12);
  // fp8 cache write: bf16 key/value read (2 B), fp8 codes written (1 B), a divide each.
  e = estimate_of(
      "cpu_attn_reshape_and_cache(isa=vec,dtype=bf16,heads_kv=2,head_size=64,block_size=32,"
      "kv=fp8_e5m2)",
      {.tokens = 3});
  EXPECT_DOUBLE_EQ(e.bytes, 2.0 * 3 * 2 * 64 * (2 + 1) + 8 * 3);
  EXPECT_DOUBLE_EQ(e.flops, 2.0 * 3 * 2 * 64);

  // onednn_mm: M = 16, K = N = 4096, bf16: a, b, c once each; 2MNK flops.
  e = estimate_of("onednn_mm(dtype=bf16,k=4096,n=4096)", {.tokens = 16});
  EXPECT_DOUBLE_EQ(e.bytes, (16.0 * 4096 + 4096.0 * 4096 + 16.0 * 4096) * 2);
  EXPECT_DOUBLE_EQ(e.flops, 2.0 * 16 * 4096 * 4096);
  // create_onednn_mm only reorders the weight.
  e = estimate_of("create_onednn_mm(dtype=bf16,k=4096,n=4096)", {.tokens = 16});
  EXPECT_DOUBLE_EQ(e.bytes, 2.0 * 4096 * 4096 * 2);
  EXPECT_DOUBLE_EQ(e.flops, 0);
}

TEST(SpecEstimate, EveryValidExampleHasAPositiveByteCount) {
  for (const auto& [name, examples] : valid_examples()) {
    for (const std::string& text : examples) {
      const Estimate e = estimate_of(text, {.tokens = 7, .batch = 3, .context = 129});
      EXPECT_GT(e.bytes, 0) << text;
      EXPECT_GE(e.flops, 0) << text;
    }
  }
}

}  // namespace
}  // namespace jit
