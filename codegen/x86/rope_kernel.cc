// rotary_embedding, in place on query (and key): per token t with position p, every query head
// and then every key head rotated with the cos/sin row cache[p] (Generator::rotate_rope_head;
// rope_rotation.cc has the math and the bf16 pairs path). Elements rot_dim..D-1 are untouched.
#include <array>
#include <cstddef>

#include "codegen/x86/generator.h"
#include "codegen/x86/kernels.h"

namespace jit::codegen::x86 {
namespace {

using namespace Xbyak;

class RopeGenerator : public Generator {
 public:
  RopeGenerator(X86Isa isa, const ir::RopeParams& p)
      : Generator(isa),
        p_(p),
        rope_(plan_rope(p.dtype, p.cache_dtype, p.rot_dim, p.style, kConstantRegs)) {}

  void generate() {
    prologue();
    mov(reg_positions_, ptr[rdi + offsetof(RopeCallArgs, positions)]);
    mov(reg_cache_, ptr[rdi + offsetof(RopeCallArgs, cos_sin_cache)]);
    mov(reg_row_, rsi);
    mov(reg_row_end_, rdx);
    mov(reg_args_, rdi);

    Label l_token, l_done;
    L(l_token);
    cmp(reg_row_, reg_row_end_);
    jge(l_done, T_NEAR);
    // reg_cache_row_ = cache + positions[t] * rot_dim * cache element size
    mov(reg_cache_row_, ptr[reg_positions_ + reg_row_ * 8]);
    imul(reg_cache_row_, reg_cache_row_, int(p_.rot_dim * dtype_size(p_.cache_dtype)));
    add(reg_cache_row_, reg_cache_);
    begin_rope_token(rope_, reg_cache_row_);
    rotate_operand(offsetof(RopeCallArgs, query), offsetof(RopeCallArgs, query_token_stride),
                   offsetof(RopeCallArgs, query_head_stride), p_.head_count_q);
    if (p_.key) {
      rotate_operand(offsetof(RopeCallArgs, key), offsetof(RopeCallArgs, key_token_stride),
                     offsetof(RopeCallArgs, key_head_stride), p_.head_count_kv);
    }
    end_rope_token(rope_);
    inc(reg_row_);
    jmp(l_token, T_NEAR);
    L(l_done);
    epilogue();
  }

 private:
  // The pairs path's constants: registers 8..11 are free here (the rotation uses 0..7).
  static constexpr std::array<int, 4> kConstantRegs{8, 9, 10, 11};

  // Rotates every head of one operand of token reg_row_.
  void rotate_operand(size_t data_offset, size_t token_stride_offset, size_t head_stride_offset,
                      int64_t heads) {
    // reg_head_ = data + t * token_stride; reg_head_stride_ = head stride (bytes)
    mov(reg_head_, ptr[reg_args_ + token_stride_offset]);
    imul(reg_head_, reg_row_);
    add(reg_head_, ptr[reg_args_ + data_offset]);
    mov(reg_head_stride_, ptr[reg_args_ + head_stride_offset]);
    mov(reg_heads_left_, heads);
    Label l_head;
    L(l_head);
    rotate_rope_head(rope_, reg_head_, reg_cache_row_);
    add(reg_head_, reg_head_stride_);
    dec(reg_heads_left_);
    jnz(l_head, T_NEAR);
  }

  const ir::RopeParams p_;
  const RopeRotation rope_;
  const Reg64 reg_positions_ = r8, reg_cache_ = r9, reg_cache_row_ = r10, reg_args_ = r11;
  const Reg64 reg_row_ = r12, reg_row_end_ = r13, reg_head_ = r14, reg_head_stride_ = r15;
  const Reg64 reg_heads_left_ = rbx;
};

}  // namespace

Result<std::vector<uint8_t>> generate_rope(const OpSpec& spec, X86Isa isa) {
  RopeGenerator gen(isa, spec.get<ir::RopeParams>());
  gen.generate();
  return gen.finish();
}

}  // namespace jit::codegen::x86
