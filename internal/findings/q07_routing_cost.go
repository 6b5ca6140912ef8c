package findings

import "context"

// runRoutingCost answers question 7. Not built yet.
func runRoutingCost(ctx context.Context, cfg Config) (Answer, error) {
	return Answer{}, ErrNotBuilt
}
