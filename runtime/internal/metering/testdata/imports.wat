;; A module that imports globals and defines its own: the budget's index comes
;; after both, and no index the module uses moves.
(module
  (import "env" "base" (global $base i64))
  (import "env" "step" (global $step (mut i64)))
  (global $own (mut i64) (i64.const 100))
  (global $k i32 (i32.const 3))
  (func (export "run") (param $n i64) (result i64)
    (local $i i64)
    (loop $l
      (global.set $own (i64.add (global.get $own) (global.get $step)))
      (global.set $step (i64.add (global.get $step) (i64.extend_i32_u (global.get $k))))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $l (i64.lt_u (local.get $i) (local.get $n))))
    (i64.add (global.get $base) (global.get $own)))
  (export "own" (global $own))
)
