;; The globals imports.wat imports.
(module
  (global (export "base") i64 (i64.const 1000))
  (global (export "step") (mut i64) (i64.const 1))
)
