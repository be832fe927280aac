#include "tests/harness/example_specs.h"

namespace jit::test {

const std::map<std::string, std::vector<std::string>>& valid_examples() {
  static const std::map<std::string, std::vector<std::string>> examples = {
      {"rms_norm",
       {"rms_norm(dtype=bf16,hidden=4096)", "rms_norm(dtype=f32,hidden=769,weight=false)",
        "rms_norm( hidden = 1 , dtype = f16 )"}},
      {"fused_add_rms_norm",
       {"fused_add_rms_norm(dtype=bf16,hidden=5120)",
        "fused_add_rms_norm(dtype=float16,hidden=8,weight=false)"}},
      {"rotary_embedding",
       {"rotary_embedding(dtype=bf16,cache_dtype=bf16,head_size=128,rot_dim=128,style=neox,"
        "heads_q=32,heads_kv=8)",
        "rotary_embedding(dtype=f32,cache_dtype=f32,head_size=80,rot_dim=32,style=gptj,"
        "heads_q=17,heads_kv=17,key=true)",
        "rotary_embedding(dtype=f16,cache_dtype=f32,head_size=64,rot_dim=64,heads_q=8,"
        "heads_kv=0,key=false)"}},
      {"silu_and_mul", {"silu_and_mul(dtype=bf16,d=13824)", "silu_and_mul(dtype=f32,d=1)"}},
      {"mul_and_silu", {"mul_and_silu(dtype=f16,d=512)", "mul_and_silu(d=7)"}},
      {"gelu_and_mul", {"gelu_and_mul(dtype=bf16,d=512)", "gelu_and_mul(dtype=f32,d=13)"}},
      {"gelu_tanh_and_mul", {"gelu_tanh_and_mul(dtype=f16,d=4096)"}},
      {"fatrelu_and_mul", {"fatrelu_and_mul(dtype=bf16,d=11008)"}},
      {"swigluoai_and_mul", {"swigluoai_and_mul(dtype=bf16,d=2880)"}},
      {"swap_blocks", {"swap_blocks(block_bytes=262144)", "swap_blocks(block_bytes=1)"}},
      {"reshape_and_cache",
       {"reshape_and_cache(dtype=bf16,kv=auto,heads_kv=8,head_size=80,block_size=16)",
        "reshape_and_cache(dtype=f32,kv=fp8_e4m3,heads_kv=8,head_size=256,block_size=32)",
        "reshape_and_cache(dtype=f16,kv=fp8_e5m2,heads_kv=1,head_size=16,block_size=1)",
        "reshape_and_cache(dtype=f32,heads_kv=2,head_size=4,block_size=8)"}},
      {"reshape_and_cache_flash",
       {"reshape_and_cache_flash(dtype=bf16,kv=auto,heads_kv=13,head_size=46,block_size=16,"
        "layout=nhd)",
        "reshape_and_cache_flash(dtype=f32,kv=fp8_e4m3,heads_kv=8,head_size=64,block_size=32,"
        "layout=hnd,per_head_scale=true)",
        "reshape_and_cache_flash(dtype=f16,kv=fp8_e5m2,heads_kv=1,head_size=1,block_size=1)",
        "reshape_and_cache_flash(dtype=bf16,kv=auto,heads_kv=8,head_size=128,block_size=16,"
        "layout=hnd)"}},
      {"concat_and_cache_mla",
       {"concat_and_cache_mla(dtype=bf16,kv=auto,kv_lora_rank=512,pe_dim=64,block_size=16)",
        "concat_and_cache_mla(dtype=bf16,kv=fp8_ds_mla,kv_lora_rank=512,pe_dim=64,"
        "block_size=64)",
        "concat_and_cache_mla(dtype=f32,kv=fp8_e4m3,kv_lora_rank=256,pe_dim=64,block_size=16)"}},
      {"concat_and_cache_mla_rope_fused",
       {"concat_and_cache_mla_rope_fused(dtype=bf16,kv=auto,kv_lora_rank=512,rot_dim=64,"
        "heads_q=128,style=neox,block_size=64)",
        "concat_and_cache_mla_rope_fused(dtype=f32,kv=fp8_e4m3,kv_lora_rank=512,rot_dim=128,"
        "heads_q=16,style=gptj,block_size=256)"}},
      {"convert_fp8",
       {"convert_fp8(dst=fp8_e4m3,src=bf16)", "convert_fp8(dst=f32,src=fp8_e4m3)",
        "convert_fp8(src=float16,dst=float8_e4m3fn)"}},
      {"gather_and_maybe_dequant_cache",
       {"gather_and_maybe_dequant_cache(dtype=f32,kv=auto,head_dim=576,block_size=16)",
        "gather_and_maybe_dequant_cache(dtype=bf16,kv=fp8_e5m2,head_dim=320,block_size=64)",
        "gather_and_maybe_dequant_cache(dtype=f16,kv=fp8_e4m3,head_dim=100,block_size=3)"}},
      {"cp_gather_cache",
       {"cp_gather_cache(dtype=f32,entry_size=576,block_size=16)",
        "cp_gather_cache(dtype=u8,entry_size=656,block_size=64)",
        "cp_gather_cache(dtype=bf16,entry_size=128,block_size=64)"}},
      {"cp_gather_and_upconvert_fp8_kv_cache",
       {"cp_gather_and_upconvert_fp8_kv_cache(block_size=64)",
        "cp_gather_and_upconvert_fp8_kv_cache(block_size=4)"}},
      {"indexer_k_quant_and_cache",
       {"indexer_k_quant_and_cache(dtype=bf16,head_dim=128,quant_block=128,block_size=64,"
        "scale_fmt=ue8m0)",
        "indexer_k_quant_and_cache(dtype=f16,head_dim=256,quant_block=64,block_size=16,"
        "scale_fmt=plain)"}},
      {"cp_gather_indexer_k_quant_cache",
       {"cp_gather_indexer_k_quant_cache(head_dim=128,quant_block=128,block_size=64)",
        "cp_gather_indexer_k_quant_cache(head_dim=128,quant_block=32,block_size=16)"}},
      {"rotary_embedding_and_cache_flash",
       {"rotary_embedding_and_cache_flash(dtype=bf16,kv=auto,heads_q=32,heads_kv=8,"
        "head_size=128,rot_dim=128,style=neox,block_size=16,layout=nhd)",
        "rotary_embedding_and_cache_flash(dtype=f16,kv=fp8_e4m3,heads_q=4,heads_kv=2,"
        "head_size=80,rot_dim=32,style=gptj,block_size=32,layout=hnd,per_head_scale=true)",
        "rotary_embedding_and_cache_flash(dtype=bf16,kv=fp8_e4m3,heads_q=8,heads_kv=2,"
        "head_size=128,rot_dim=128,style=neox,block_size=16,layout=nhd)"}},
      {"paged_attention_v1",
       {"paged_attention_v1(dtype=bf16,kv=auto,head_size=128,block_size=16,heads_q=64,"
        "heads_kv=8)",
        "paged_attention_v1(dtype=f16,kv=fp8_e4m3,head_size=96,block_size=32,heads_q=40,"
        "heads_kv=40,alibi=true,blocksparse=true,partition_size=0)",
        "paged_attention_v1(dtype=f32,kv=auto,head_size=36,block_size=7,heads_q=4,heads_kv=1)"}},
      {"paged_attention_v2",
       {"paged_attention_v2(dtype=bf16,kv=auto,head_size=128,block_size=16,heads_q=64,"
        "heads_kv=8,partition_size=512)",
        "paged_attention_v2(dtype=f32,kv=fp8_e5m2,head_size=256,block_size=32,heads_q=8,"
        "heads_kv=2,alibi=true,partition_size=1024)"}},
      {"merge_attn_states",
       {"merge_attn_states(dtype=bf16,out_dtype=bf16,heads=32,head_size=128,output_lse=true)",
        "merge_attn_states(dtype=f16,out_dtype=fp8_e4m3,heads=16,head_size=48)"}},
      {"convert_vertical_slash_indexes",
       {"convert_vertical_slash_indexes(block_m=64,block_n=64,causal=true)",
        "convert_vertical_slash_indexes(block_m=2,block_n=2,causal=false)"}},
      {"convert_vertical_slash_indexes_mergehead",
       {"convert_vertical_slash_indexes_mergehead(block_m=64,block_n=64)",
        "convert_vertical_slash_indexes_mergehead(block_m=128,block_n=128,causal=false)"}},
      {"top_k_per_row_prefill",
       {"top_k_per_row_prefill(top_k=2048)", "top_k_per_row_prefill(top_k=3000)"}},
      {"top_k_per_row_decode",
       {"top_k_per_row_decode(top_k=2048)", "top_k_per_row_decode(top_k=1)"}},
      {"cpu_attn_get_scheduler_metadata",
       {"cpu_attn_get_scheduler_metadata(isa=vec,dtype=bf16,head_size=128,heads_q=8,"
        "heads_kv=2,causal=true)",
        "cpu_attn_get_scheduler_metadata(isa=vec16,dtype=f32,head_size=80,heads_q=9,"
        "heads_kv=3,causal=false)"}},
      {"cpu_attn_reshape_and_cache",
       {"cpu_attn_reshape_and_cache(isa=amx,dtype=bf16,heads_kv=4,head_size=96,"
        "block_size=128)",
        "cpu_attn_reshape_and_cache(isa=vec16,dtype=f16,heads_kv=2,head_size=112,"
        "block_size=48)",
        "cpu_attn_reshape_and_cache(isa=vec,dtype=bf16,heads_kv=2,head_size=64,block_size=32,"
        "kv=fp8_e4m3)",
        "cpu_attn_reshape_and_cache(isa=vec16,dtype=bf16,heads_kv=2,head_size=57,block_size=16,"
        "kv=auto)"}},
      {"cpu_attention_with_kv_cache",
       {"cpu_attention_with_kv_cache(isa=vec,dtype=bf16,head_size=128,block_size=96,"
        "heads_q=8,heads_kv=2)",
        "cpu_attention_with_kv_cache(isa=neon,dtype=f16,head_size=64,block_size=32,heads_q=4,"
        "heads_kv=4,causal=false,sliding_window=true,alibi=true,softcap=true,sinks=true)",
        "cpu_attention_with_kv_cache(isa=vec,dtype=f16,head_size=64,block_size=32,heads_q=8,"
        "heads_kv=2,sliding_window=true,softcap=true,kv=fp8_e5m2)",
        "cpu_attention_with_kv_cache(isa=vec,dtype=bf16,head_size=57,block_size=32,heads_q=8,"
        "heads_kv=1,alibi=true,kv=fp8_e4m3)",
        "cpu_attention_with_kv_cache(isa=amx,dtype=bf16,head_size=128,block_size=32,heads_q=32,"
        "heads_kv=4)"}},
      {"create_onednn_mm",
       {"create_onednn_mm(dtype=bf16,k=4096,n=16384)", "create_onednn_mm(dtype=f32,k=491,n=1023)"}},
      {"onednn_mm", {"onednn_mm(dtype=bf16,k=128,n=256)", "onednn_mm(dtype=f16,k=15,n=1001)"}},
      {"create_onednn_scaled_mm",
       {"create_onednn_scaled_mm(out_dtype=bf16,k=4096,n=4096,dynamic=true,azp=true,"
        "per_channel=true)",
        "create_onednn_scaled_mm(out_dtype=f32,k=15,n=1001,dynamic=false)"}},
      {"onednn_scaled_mm",
       {"onednn_scaled_mm(out_dtype=f16,k=128,n=256,dynamic=false,azp=true)",
        "onednn_scaled_mm(out_dtype=bf16,k=4096,n=4096)"}},
  };
  return examples;
}

}  // namespace jit::test
