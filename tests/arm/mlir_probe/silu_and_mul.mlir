// silu_and_mul, f32 in / bf16 out, d = 4096: the main loop of the arm generator in MLIR's
// vector/arith/scf dialects (exp via math.exp).
func.func @kiln_silu(%src: memref<?x8192xf32>, %dst: memref<?x4096xbf16>, %rows: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c4096 = arith.constant 4096 : index
  %one = arith.constant dense<1.0> : vector<16xf32>
  %zero = arith.constant 0.0 : f32
  scf.for %r = %c0 to %rows step %c1 {
    scf.for %i = %c0 to %c4096 step %c16 {
      %x = vector.transfer_read %src[%r, %i], %zero {in_bounds = [true]} : memref<?x8192xf32>, vector<16xf32>
      %j = arith.addi %i, %c4096 : index
      %y = vector.transfer_read %src[%r, %j], %zero {in_bounds = [true]} : memref<?x8192xf32>, vector<16xf32>
      %nx = arith.negf %x : vector<16xf32>
      %e = math.exp %nx : vector<16xf32>
      %den = arith.addf %one, %e : vector<16xf32>
      %s = arith.divf %x, %den : vector<16xf32>
      %o = arith.mulf %s, %y : vector<16xf32>
      %b = arith.truncf %o : vector<16xf32> to vector<16xbf16>
      vector.transfer_write %b, %dst[%r, %i] {in_bounds = [true]} : vector<16xbf16>, memref<?x4096xbf16>
    }
  }
  return
}
