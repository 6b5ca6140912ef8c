package findings

// Questions is the full set, in the order of design/findings.md. Each
// question, with its experiment, lives in its own file (qNN_slug.go).
func Questions() []Question {
	return []Question{
		handoffQuestion,
		cleanupQuestion,
		searchQuestion,
		diskQuestion,
		afterHandoffQuestion,
		childrenQuestion,
		routingCostQuestion,
		staleQuestion,
		crashQuestion,
		mergeQuestion,
		scaleQuestion,
		idIndexQuestion,
		replicatedQuestion,
	}
}
