;; A start function with a loop, which runs while the module is instantiated,
;; before the host can set the budget: Options.Initial pays for it.
(module
  (global $g (mut i32) (i32.const 0))
  (func $start
    (loop $l
      (global.set $g (i32.add (global.get $g) (i32.const 1)))
      (br_if $l (i32.lt_u (global.get $g) (i32.const 1000)))))
  (start $start)
  (func (export "get") (result i32) (global.get $g))
)
