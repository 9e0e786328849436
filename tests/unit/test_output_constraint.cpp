// OutputConstraint, the one interface the engine holds per constrained request: each of the JSON
// object, choice and regex constraints masks like its prefix class, takes the end of sequence only
// where its text may end, says when the text is complete, and names its dead end.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sampling/output_constraint.h"
#include "token_mask_test_util.h"

namespace dsv4 {
namespace {

using Ids = std::vector<int32_t>;

// Id 0 is the end of sequence (no bytes, as the engine gives special tokens).
const std::vector<std::string> kVocabulary = {"", "{", "}", "\"a\"", ":", "1", "y", "es", "no", "x"};
constexpr int32_t kEos = 0;

Ids allowed_ids(OutputConstraint& constraint, const JsonTokenMask& vocab, bool eos_allowed = true) {
  return testing::allowed_ids(constraint, vocab, kEos, eos_allowed);
}

std::shared_ptr<const std::vector<std::string>> choices(std::vector<std::string> list) {
  return std::make_shared<const std::vector<std::string>>(std::move(list));
}

TEST(OutputConstraint, JsonObjectNeverAllowsTheEndOfSequenceAndFinishesWhenTheObjectCloses) {
  const JsonTokenMask vocab(kVocabulary);
  const auto constraint = OutputConstraint::json_object(nullptr);
  EXPECT_EQ(allowed_ids(*constraint, vocab), (Ids{1}));
  constraint->advance("{");
  EXPECT_FALSE(constraint->finished());
  EXPECT_EQ(allowed_ids(*constraint, vocab), (Ids{2, 3}));
  constraint->advance("}");
  EXPECT_TRUE(constraint->finished());
  EXPECT_EQ(allowed_ids(*constraint, vocab), Ids{});
  EXPECT_EQ(constraint->dead_end_message(), "no token of the vocabulary can continue the JSON object");
}

TEST(OutputConstraint, JsonObjectKeepsItsSchema) {
  const JsonTokenMask vocab(kVocabulary);
  auto schema = JsonSchema::compile(nlohmann::ordered_json::parse(R"({"required": ["a"]})"));
  const auto constraint = OutputConstraint::json_object(schema);
  schema.reset();  // the constraint's copy is the last
  constraint->advance("{");
  EXPECT_EQ(allowed_ids(*constraint, vocab), (Ids{3}));  // the required key, not "}"
  constraint->advance("\"a\":1");
  EXPECT_FALSE(constraint->finished());
  constraint->advance("}");
  EXPECT_TRUE(constraint->finished());
}

TEST(OutputConstraint, ChoiceFinishesOnAChoiceNoOtherContinues) {
  const JsonTokenMask vocab(kVocabulary);
  const auto constraint = OutputConstraint::choice(choices({"y", "yes", "no"}));
  EXPECT_EQ(allowed_ids(*constraint, vocab), (Ids{6, 8}));
  constraint->advance("y");
  EXPECT_FALSE(constraint->finished());  // "yes" goes on from it
  EXPECT_EQ(allowed_ids(*constraint, vocab), (Ids{kEos, 7}));
  EXPECT_EQ(allowed_ids(*constraint, vocab, /*eos_allowed=*/false), (Ids{7}));
  constraint->advance("es");
  EXPECT_TRUE(constraint->finished());
  EXPECT_EQ(constraint->dead_end_message(), "no token of the vocabulary can continue any of the choices");
}

TEST(OutputConstraint, RegexFinishesOnAMatchNoByteExtends) {
  const JsonTokenMask vocab(kVocabulary);
  const auto constraint = OutputConstraint::regex(std::make_shared<const RegexNfa>(RegexNfa::compile("y(es)?")));
  EXPECT_EQ(allowed_ids(*constraint, vocab), (Ids{6}));
  constraint->advance("y");
  EXPECT_FALSE(constraint->finished());  // "es" may follow
  EXPECT_EQ(allowed_ids(*constraint, vocab), (Ids{kEos, 7}));
  EXPECT_EQ(allowed_ids(*constraint, vocab, /*eos_allowed=*/false), (Ids{7}));
  constraint->advance("es");
  EXPECT_TRUE(constraint->finished());
  EXPECT_EQ(constraint->dead_end_message(), "no token of the vocabulary can continue a match of the regex");
}

}  // namespace
}  // namespace dsv4
