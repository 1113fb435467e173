;; The token broadcast's kernel in WebAssembly SIMD: 16 tokens per step, four 16-byte stores.
;; `broadcast-wasm.ts` holds this module compiled (`node --import tsx scripts/build-wasm.ts`).
(module
  (memory (export "memory") 1)
  ;; Where in its response the last call stopped.
  (global $off (export "off") (mut i32) (i32.const 0))

  ;; Write `count` tokens to out[0..count): response i's float32 bits (bits[i]) from token `off` of it on,
  ;; then response i+1's, and so on. With `masked`, a token whose mask byte (mask[0..count)) is 0 gets
  ;; ±0 with the value's sign, as value × 0 does for a finite value. Returns the response the next
  ;; call starts in; $off holds the token in it.
  (func (export "fill")
    (param $i i32) (param $off i32) (param $count i32) (param $masked i32)
    (param $lengths i32) (param $bits i32) (param $mask i32) (param $out i32)
    (result i32)
    (local $len i32) (local $run i32) (local $b i32) (local $z i32) (local $limit i32)
    (local $end i32) (local $o i32) (local $m i32) (local $v v128) (local $zv v128) (local $zero v128)
    (local.set $o (local.get $out))
    (local.set $m (local.get $mask))
    (local.set $limit (i32.add (local.get $out) (i32.shl (local.get $count) (i32.const 2))))
    (block $done
      (loop $response
        (br_if $done (i32.ge_u (local.get $o) (local.get $limit)))
        (local.set $len (i32.load (i32.add (local.get $lengths) (i32.shl (local.get $i) (i32.const 2)))))
        (local.set $b (i32.load (i32.add (local.get $bits) (i32.shl (local.get $i) (i32.const 2)))))
        ;; this response's tokens in this call: min(len - off, tokens left)
        (local.set $run (i32.sub (local.get $len) (local.get $off)))
        (if (i32.gt_u (local.get $run) (i32.shr_u (i32.sub (local.get $limit) (local.get $o)) (i32.const 2)))
          (then (local.set $run (i32.shr_u (i32.sub (local.get $limit) (local.get $o)) (i32.const 2)))))
        (local.set $off (i32.add (local.get $off) (local.get $run)))
        (local.set $end (i32.add (local.get $o) (i32.shl (local.get $run) (i32.const 2))))
        (local.set $v (i32x4.splat (local.get $b)))
        (if (local.get $masked)
          (then
            (local.set $z (i32.and (local.get $b) (i32.const 0x80000000)))
            (local.set $zv (i32x4.splat (local.get $z)))
            (block $exit16
              (loop $step16
                (br_if $exit16 (i32.gt_u (i32.add (local.get $o) (i32.const 64)) (local.get $end)))
                (local.set $zero (i8x16.eq (v128.load (local.get $m)) (v128.const i32x4 0 0 0 0)))
                (if (v128.any_true (local.get $zero))
                  (then
                    ;; widen each byte's "masked" flag to its token's 32-bit lane and pick ±0 there
                    (v128.store offset=0 (local.get $o) (v128.bitselect (local.get $zv) (local.get $v)
                      (i32x4.extend_low_i16x8_s (i16x8.extend_low_i8x16_s (local.get $zero)))))
                    (v128.store offset=16 (local.get $o) (v128.bitselect (local.get $zv) (local.get $v)
                      (i32x4.extend_high_i16x8_s (i16x8.extend_low_i8x16_s (local.get $zero)))))
                    (v128.store offset=32 (local.get $o) (v128.bitselect (local.get $zv) (local.get $v)
                      (i32x4.extend_low_i16x8_s (i16x8.extend_high_i8x16_s (local.get $zero)))))
                    (v128.store offset=48 (local.get $o) (v128.bitselect (local.get $zv) (local.get $v)
                      (i32x4.extend_high_i16x8_s (i16x8.extend_high_i8x16_s (local.get $zero))))))
                  (else
                    (v128.store offset=0 (local.get $o) (local.get $v))
                    (v128.store offset=16 (local.get $o) (local.get $v))
                    (v128.store offset=32 (local.get $o) (local.get $v))
                    (v128.store offset=48 (local.get $o) (local.get $v))))
                (local.set $o (i32.add (local.get $o) (i32.const 64)))
                (local.set $m (i32.add (local.get $m) (i32.const 16)))
                (br $step16)))
            (block $exit1
              (loop $step1
                (br_if $exit1 (i32.ge_u (local.get $o) (local.get $end)))
                (i32.store (local.get $o) (select (local.get $b) (local.get $z) (i32.load8_u (local.get $m))))
                (local.set $o (i32.add (local.get $o) (i32.const 4)))
                (local.set $m (i32.add (local.get $m) (i32.const 1)))
                (br $step1))))
          (else
            (block $exit16
              (loop $step16
                (br_if $exit16 (i32.gt_u (i32.add (local.get $o) (i32.const 64)) (local.get $end)))
                (v128.store offset=0 (local.get $o) (local.get $v))
                (v128.store offset=16 (local.get $o) (local.get $v))
                (v128.store offset=32 (local.get $o) (local.get $v))
                (v128.store offset=48 (local.get $o) (local.get $v))
                (local.set $o (i32.add (local.get $o) (i32.const 64)))
                (br $step16)))
            (block $exit1
              (loop $step1
                (br_if $exit1 (i32.ge_u (local.get $o) (local.get $end)))
                (i32.store (local.get $o) (local.get $b))
                (local.set $o (i32.add (local.get $o) (i32.const 4)))
                (br $step1)))))
        ;; a response written to its end (or empty): the next one
        (if (i32.eq (local.get $off) (local.get $len))
          (then
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (local.set $off (i32.const 0))))
        (br $response)))
    (global.set $off (local.get $off))
    (local.get $i)))
