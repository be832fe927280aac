#pragma once
#include "ir/op_spec.h"
