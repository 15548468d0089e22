// RUN: ddpc-opt %s --split-input-file --verify-diagnostics --ddpc-build-training-step
//
// The pass checks the importer's contract before building the step: both
// imports of the forward graph, with bodies, named arguments of known
// roles and the same arguments. Each case once crashed it.

// expected-error @+1 {{ddpc-build-training-step needs @forward_train and @forward_eval (ddpc compile --train imports both)}}
module {
  func.func @forward_train(%arg0: tensor<4xf32> {ddpc.name = "x", ddpc.role = "input"}) -> tensor<4xf32> {
    return %arg0 : tensor<4xf32>
  }
}

// -----

module {
  func.func @forward_train(%x: tensor<4xf32> {ddpc.name = "x"}) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
  // expected-error @+1 {{@forward_eval is a declaration; it needs a body}}
  func.func private @forward_eval(tensor<4xf32> {ddpc.name = "x"}) -> tensor<4xf32>
}

// -----

module {
  // expected-error @+1 {{@forward_train argument 0 has no ddpc.name}}
  func.func @forward_train(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
  func.func @forward_eval(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

module {
  // expected-error @+1 {{argument 'W' has ddpc.role 'bogus' (input, param, buffer or rng)}}
  func.func @forward_train(%w: tensor<4xf32> {ddpc.name = "W", ddpc.role = "bogus"}) -> tensor<4xf32> {
    return %w : tensor<4xf32>
  }
  func.func @forward_eval(%w: tensor<4xf32> {ddpc.name = "W", ddpc.role = "bogus"}) -> tensor<4xf32> {
    return %w : tensor<4xf32>
  }
}

// -----

module {
  // expected-error @+1 {{argument 'W' (ddpc.role rng) must be tensor<2xi64>}}
  func.func @forward_train(%w: tensor<4xf32> {ddpc.name = "W", ddpc.role = "rng"}) -> tensor<4xf32> {
    return %w : tensor<4xf32>
  }
  func.func @forward_eval() -> tensor<4xf32> {
    %c = arith.constant dense<0.0> : tensor<4xf32>
    return %c : tensor<4xf32>
  }
}

// -----

module {
  // expected-error @+1 {{@forward_train argument 0 has ddpc.role rng; only the last one may}}
  func.func @forward_train(%r: tensor<2xi64> {ddpc.name = "rng", ddpc.role = "rng"}, %x: tensor<4xf32> {ddpc.name = "x"}) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
  func.func @forward_eval(%x: tensor<4xf32> {ddpc.name = "x"}) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

module {
  func.func @forward_train(%x: tensor<4xf32> {ddpc.name = "x"}) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
  // expected-error @+1 {{@forward_eval must take the 1 arguments of @forward_train (without its rng)}}
  func.func @forward_eval(%x: tensor<4xf32> {ddpc.name = "x"}, %y: tensor<4xf32> {ddpc.name = "y"}) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

module {
  func.func @forward_train(%w: tensor<4xf32> {ddpc.name = "W", ddpc.role = "param"}) -> tensor<4xf32> {
    return %w : tensor<4xf32>
  }
  // expected-error @+1 {{@forward_eval argument 0 differs from @forward_train's in type, ddpc.name or ddpc.role}}
  func.func @forward_eval(%w: tensor<4xf32> {ddpc.name = "V", ddpc.role = "param"}) -> tensor<4xf32> {
    return %w : tensor<4xf32>
  }
}
