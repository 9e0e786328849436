// Token id lists as `dsv4 logits --ids` and `dsv4 generate --prompt-ids` read them.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tools/token_ids.h"

namespace dsv4::tools {
namespace {

TEST(TokenIds, ParsesCommaSeparatedIdsWithSpaces) {
  EXPECT_EQ(parse_token_ids("1,2,3", "t"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse_token_ids(" 0 ,\n129279 , 7\n", "t"), (std::vector<int32_t>{0, 129279, 7}));
  EXPECT_EQ(parse_token_ids("4,", "t"), (std::vector<int32_t>{4}));  // a trailing comma
}

TEST(TokenIds, RejectsWhatIsNotAnId) {
  for (const char* bad : {"", " ", "1,,2", ",1", "1,x", "1.5", "-3", "99999999999", "1 2"})
    EXPECT_THROW(parse_token_ids(bad, "t"), UsageError) << "'" << bad << "'";
  try {
    parse_token_ids("1,2,oops", "ids.txt");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "ids.txt: entry 2 ('oops') is not a token id");
  }
}

}  // namespace
}  // namespace dsv4::tools
