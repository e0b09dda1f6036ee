// Tests of gattn/gate/shape.hpp: the gate's heads, target width and scores per head for every GQA
// position and granularity, and for MLA's G1 gate.
#include <gtest/gtest.h>

#include "gattn/gate/shape.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_shape {

namespace {

using gattn::gate_position;
using gattn::granularity;

gattn::gqa_config gqa(gate_position at, granularity g) {
  gattn::gqa_config c;
  c.hidden = 96;
  c.q_heads = 8;
  c.kv_heads = 2;
  c.head_dim = 16;
  c.gate.enabled = true;
  c.gate.position = at;
  c.gate.granularity = g;
  return c;
}

TEST(GateShape, EveryGqaPositionAndGranularity) {
  struct want { gate_position at; gattn::index heads, width; };
  for (const want& w : {want{gate_position::g1, 8, 16}, want{gate_position::g2, 2, 16}, want{gate_position::g3, 2, 16},
                        want{gate_position::g4, 8, 16}, want{gate_position::g5, 1, 96}}) {
    const gattn::gate_shape e = gattn::shape_of_gate(gqa(w.at, granularity::elementwise));
    EXPECT_EQ(e.heads, w.heads);
    EXPECT_EQ(e.width, w.width);
    EXPECT_EQ(e.per_head, w.width);
    EXPECT_EQ(e.scores(), w.heads * w.width);
    const gattn::gate_shape h = gattn::shape_of_gate(gqa(w.at, granularity::headwise));
    EXPECT_EQ(h.heads, w.heads);
    EXPECT_EQ(h.width, w.width);
    EXPECT_EQ(h.per_head, 1);
    EXPECT_EQ(h.scores(), w.heads);
  }
}

TEST(GateShape, MlaG1OverTheValueHeads) {
  gattn::mla_config c;
  c.heads = 6;
  c.v_head_dim = 32;
  c.gate.enabled = true;
  const gattn::gate_shape e = gattn::shape_of_gate(c);
  EXPECT_EQ(e.heads, 6);
  EXPECT_EQ(e.width, 32);
  EXPECT_EQ(e.per_head, 32);
  c.gate.granularity = granularity::headwise;
  EXPECT_EQ(gattn::shape_of_gate(c).per_head, 1);
  EXPECT_EQ(gattn::shape_of_gate(c).scores(), 6);
}

}  // namespace

}  // namespace test_shape
