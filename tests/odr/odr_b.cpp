// Second translation unit of the ODR check (see odr_a.cpp).
#include <string>

#include "odr/odr_all.hpp"

namespace gattn_odr {

std::string from_b() { return gattn::detail::concat("odr-", 'b', 2); }

// Throws from this TU; odr_a.cpp catches it by base class (type_info must match across TUs).
void throw_from_b() { gattn::detail::require<gattn::config_error>(false, "H_q=", 6, " H_kv=", 4); }

}  // namespace gattn_odr
