// Must NOT compile: an MLA layer has the G1 gate only (docs/spec.md §3), so gated_mla<G3 gate> is refused at
// compile time. With GATTN_COMPILE_FAIL_CONTROL the same TU uses a G1 gate and must compile, which
// shows that the failure comes from the gate rule and not from a broken include.
#include <gattn/attention/any_layer.hpp>

#ifdef GATTN_COMPILE_FAIL_CONTROL
using tested_gate = gattn::gate<gattn::gate_position::g1, gattn::granularity::elementwise>;
#else
using tested_gate = gattn::gate<gattn::gate_position::g3, gattn::granularity::elementwise>;
#endif

int main() {
  gattn::mla_config cfg;
  gattn::weight_map w;
  gattn::gated_mla<tested_gate> layer(cfg, w);
  return 0;
}
