;; Every control construct the metering pass must charge for. Each export
;; takes a size n and returns a result that depends on all the work done, so a
;; metered run can be compared with an unmetered one; with a large enough n
;; every one of them runs away.
(module
  (memory (export "memory") 1)
  (global $calls (mut i32) (i32.const 0))
  (global $k i64 (i64.const 7))
  (table 4 funcref)
  (elem (i32.const 0) $inc $dbl $sq $inc)
  (type $un (func (param i64) (result i64)))

  (func $inc (type $un) (i64.add (local.get 0) (i64.const 1)))
  (func $dbl (type $un) (i64.mul (local.get 0) (i64.const 2)))
  (func $sq (type $un) (i64.mul (local.get 0) (local.get 0)))

  ;; Straight-line code: only the entry charge.
  (func (export "straight") (param $n i64) (result i64)
    (i64.add (i64.mul (local.get $n) (global.get $k)) (i64.const 3)))

  ;; Sum of i*j for i, j < n: a loop inside a loop.
  (func (export "nested") (param $n i64) (result i64)
    (local $i i64) (local $j i64) (local $s i64)
    (block $done
      (loop $outer
        (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
        (local.set $j (i64.const 0))
        (block $inner_done
          (loop $inner
            (br_if $inner_done (i64.ge_u (local.get $j) (local.get $n)))
            (local.set $s (i64.add (local.get $s) (i64.mul (local.get $i) (local.get $j))))
            (local.set $j (i64.add (local.get $j) (i64.const 1)))
            (br $inner)))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $outer)))
    (local.get $s))

  ;; A state machine: br_table picks the next state on every turn.
  (func (export "brtable") (param $n i64) (result i64)
    (local $state i32) (local $acc i64)
    (loop $turn
      (block $s2
        (block $s1
          (block $s0
            (br_table $s0 $s1 $s2 (local.get $state)))
          ;; state 0
          (local.set $acc (i64.add (local.get $acc) (i64.const 1)))
          (local.set $state (i32.const 1))
          (br $s2))
        ;; state 1
        (local.set $acc (i64.mul (local.get $acc) (i64.const 3)))
        (local.set $state (i32.const 2)))
      ;; after every state
      (if (i32.eq (local.get $state) (i32.const 2))
        (then (local.set $state (i32.const 0))))
      (local.set $n (i64.sub (local.get $n) (i64.const 1)))
      (br_if $turn (i64.gt_s (local.get $n) (i64.const 0))))
    (local.get $acc))

  ;; Leaves a loop with br_if to an enclosing block, and with return.
  (func (export "brif_out") (param $n i64) (result i64)
    (local $i i64)
    (block $out
      (loop $l
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (if (i64.eq (local.get $i) (i64.const 1000000000000))
          (then (return (i64.const -1))))
        (br_if $out (i64.ge_u (local.get $i) (local.get $n)))
        (br $l)))
    (i64.mul (local.get $i) (i64.const 5)))

  ;; n! by recursion (wrapping): no loop at all.
  (func $fact (export "fact") (param $n i64) (result i64)
    (if (result i64) (i64.le_s (local.get $n) (i64.const 1))
      (then (i64.const 1))
      (else (i64.mul (local.get $n) (call $fact (i64.sub (local.get $n) (i64.const 1)))))))

  ;; A call tree: every call ends, but tree(n) makes 2^n of them.
  (func $tree (export "tree") (param $n i64) (result i64)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (if (result i64) (i64.eqz (local.get $n))
      (then (i64.const 1))
      (else (i64.add
        (call $tree (i64.sub (local.get $n) (i64.const 1)))
        (call $tree (i64.sub (local.get $n) (i64.const 1)))))))

  ;; The call tree again, each function shaped as Go's wasm port shapes
  ;; every function: a straight prologue, then a block and a loop around the
  ;; body. Its entry's charge is folded into the loop's (one charge a call).
  (func $gotree (export "gotree") (param $n i64) (result i64)
    (local $r i64)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (local.set $r (i64.const 0))
    (block $done
      (loop $body
        (if (i64.eqz (local.get $n))
          (then (local.set $r (i64.const 1)) (br $done)))
        (local.set $r (i64.add
          (call $gotree (i64.sub (local.get $n) (i64.const 1)))
          (call $gotree (i64.sub (local.get $n) (i64.const 1)))))))
    (local.get $r))

  ;; Loops inside a block, inside both arms of an if, and a loop that calls
  ;; through a table.
  (func (export "inside") (param $n i64) (result i64)
    (local $i i64) (local $acc i64)
    (block $b
      (loop $l1
        (local.set $acc (i64.add (local.get $acc) (i64.const 2)))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br_if $l1 (i64.lt_u (local.get $i) (local.get $n)))))
    (local.set $i (i64.const 0))
    (if (i64.gt_u (local.get $n) (i64.const 3))
      (then
        (loop $l2
          (local.set $acc (i64.xor (local.get $acc) (local.get $i)))
          (local.set $i (i64.add (local.get $i) (i64.const 1)))
          (br_if $l2 (i64.lt_u (local.get $i) (local.get $n)))))
      (else
        (loop $l3
          (local.set $acc (i64.add (local.get $acc) (i64.const 11)))
          (local.set $i (i64.add (local.get $i) (i64.const 1)))
          (br_if $l3 (i64.lt_u (local.get $i) (local.get $n))))))
    (local.set $i (i64.const 0))
    (loop $l4
      (local.set $acc
        (call_indirect (type $un) (local.get $acc) (i32.wrap_i64 (i64.rem_u (local.get $i) (i64.const 4)))))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $l4 (i64.lt_u (local.get $i) (local.get $n))))
    (local.get $acc))

  ;; A loop whose body is a block that branches back to the loop ("continue")
  ;; from inside nested blocks.
  (func (export "continue") (param $n i64) (result i64)
    (local $i i64) (local $odd i64)
    (loop $l
      (block $skip
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br_if $skip (i64.eqz (i64.rem_u (local.get $i) (i64.const 2))))
        (local.set $odd (i64.add (local.get $odd) (local.get $i))))
      (br_if $l (i64.lt_u (local.get $i) (local.get $n))))
    (local.get $odd))

  ;; Bulk memory and SIMD inside a loop: fills, copies and sums lanes.
  (func (export "simd") (param $n i64) (result i64)
    (local $i i64) (local $v v128)
    (memory.fill (i32.const 0) (i32.const 1) (i32.const 64))
    (loop $l
      (memory.copy (i32.const 64) (i32.const 0) (i32.const 32))
      (local.set $v (i32x4.add (v128.load offset=64 (i32.const 0)) (v128.const i32x4 1 2 3 4)))
      (v128.store (i32.const 0) (i8x16.shuffle 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 (local.get $v) (local.get $v)))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $l (i64.lt_u (local.get $i) (local.get $n))))
    (i64.add (i64x2.extract_lane 0 (v128.load (i32.const 0))) (i64.extend_i32_u (i32x4.extract_lane 3 (local.get $v)))))

  ;; A loop that takes a parameter (multi-value): the charge at its header
  ;; has a loop of its own to branch back to after a refill.
  (func (export "loopparam") (param $n i64) (result i64)
    (local $i i64)
    (i64.const 1)
    (loop $l (param i64) (result i64)
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (i64.add (i64.mul (i64.const 3)) (local.get $i))
      (br_if $l (i64.lt_u (local.get $i) (local.get $n)))))

  ;; The shortest runaway.
  (func (export "spin") (param $n i64) (result i64)
    (loop $l (br $l))
    (unreachable))

  ;; The guest's own trap, for telling it from an exhausted budget.
  (func (export "trap") (param $n i64) (result i64)
    (unreachable))

  (func (export "calls") (result i32) (global.get $calls))
)
